-- pdfqueue:no-transaction
-- A users table keyed by UUID or text (PDFQUEUE_USERS_ID_TYPE): pdfqueue's rows name such a
-- user in `user_ref`, as integer ids stay in `user_id` with the index they have had. Adding a
-- column without a default only changes the catalog; the index is built concurrently, so that
-- a large table keeps taking writes meanwhile. Erasing a person finds their rows by it.
ALTER TABLE pdfqueue_files ADD COLUMN IF NOT EXISTS user_ref text;
CREATE INDEX CONCURRENTLY IF NOT EXISTS pdfqueue_files_by_user_ref ON pdfqueue_files (user_ref)
    WHERE user_ref IS NOT NULL;
