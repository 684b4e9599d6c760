"""PostgreSQL: the pool, the rows of batches, files, users and retention, and the schema."""
