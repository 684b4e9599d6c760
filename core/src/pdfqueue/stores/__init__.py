"""Stores: PostgreSQL, Redis (state, queue, fair dispatch, quotas) and object storage."""
