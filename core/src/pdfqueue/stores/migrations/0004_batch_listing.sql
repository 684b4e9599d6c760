-- The batch list (`GET /v1/batches`) and the paged report (`GET /v1/batches/{id}/files/page`).
-- The uploaded file's name, as the uploader gave it (sanitised; display only, never a path).
ALTER TABLE pdfqueue_batches ADD COLUMN file_name text;

-- A tenant's batches newest first, paged by (created_at, id): one index range per page.
CREATE INDEX pdfqueue_batches_by_tenant ON pdfqueue_batches (tenant, created_at DESC, id DESC);

-- The report filtered by outcome, or sorted by name, stays an index range at 50,000 files.
CREATE INDEX pdfqueue_files_by_outcome ON pdfqueue_files (batch_id, outcome, reason, idx);
CREATE INDEX pdfqueue_files_by_name ON pdfqueue_files (batch_id, name, idx);
