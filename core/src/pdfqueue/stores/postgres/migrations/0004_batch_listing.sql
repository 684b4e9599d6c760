-- pdfqueue:no-transaction
-- The batch list (`GET /v1/batches`) and the paged report (`GET /v1/batches/{id}/files/page`).
-- Built CONCURRENTLY, statement by statement: on a large pdfqueue_files the build takes long,
-- and a plain CREATE INDEX would block every write to the table for as long.
-- The uploaded file's name, as the uploader gave it (sanitised; display only, never a path).
ALTER TABLE pdfqueue_batches ADD COLUMN IF NOT EXISTS file_name text;

-- A tenant's batches newest first, paged by (created_at, id): one index range per page.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pdfqueue_batches_by_tenant
    ON pdfqueue_batches (tenant, created_at DESC, id DESC);

-- The report filtered by outcome, or sorted by name, stays an index range at 50,000 files.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pdfqueue_files_by_outcome
    ON pdfqueue_files (batch_id, outcome, reason, idx);
CREATE INDEX CONCURRENTLY IF NOT EXISTS pdfqueue_files_by_name
    ON pdfqueue_files (batch_id, name, idx);
