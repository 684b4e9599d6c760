-- pdfqueue:no-transaction
-- Purging finds ended batches by when they ended, and erasing a person finds the files linked
-- to them by user: both index ranges, never a scan of pdfqueue_files. Built concurrently, so
-- that an installation with a large table keeps taking writes meanwhile.
CREATE INDEX CONCURRENTLY IF NOT EXISTS pdfqueue_batches_ended ON pdfqueue_batches (completed_at)
    WHERE status IN ('COMPLETED', 'FAILED', 'CANCELLED');
CREATE INDEX CONCURRENTLY IF NOT EXISTS pdfqueue_files_by_user ON pdfqueue_files (user_id)
    WHERE user_id IS NOT NULL;
