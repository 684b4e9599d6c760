-- Re-running a batch's failed files (`POST /v1/batches/{id}/retry`) keeps each file's history.
-- A file's tries (1 until it is retried) and the reason its previous try failed; while a retry
-- runs, the file's outcome is 'retrying' (never counted), and the worker's first write wins.
ALTER TABLE pdfqueue_files ADD COLUMN tries integer NOT NULL DEFAULT 1;
ALTER TABLE pdfqueue_files ADD COLUMN previous_reason text;

-- How many retries the batch has had: it names each round's jobs and the batch's event ids.
ALTER TABLE pdfqueue_batches ADD COLUMN retries integer NOT NULL DEFAULT 0;
