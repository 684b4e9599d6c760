"""Observability: logging, tracing, metrics and periodic tasks; never imports a store."""
