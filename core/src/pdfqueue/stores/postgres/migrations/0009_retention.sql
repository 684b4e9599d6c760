-- Retention and erasure. A batch being erased is hidden at once (`erasing_at` is set) and
-- removed in steps that a rerun can finish; the audit trail says what was removed, without
-- personal data, and is kept for a period of its own.
ALTER TABLE pdfqueue_batches ADD COLUMN IF NOT EXISTS erasing_at timestamptz;

CREATE TABLE IF NOT EXISTS pdfqueue_audit (
    id        bigserial PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    actor     text NOT NULL,
    action    text NOT NULL,
    subject   text NOT NULL,
    files     bigint NOT NULL DEFAULT 0,
    objects   bigint NOT NULL DEFAULT 0,
    bytes     bigint NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS pdfqueue_audit_by_time ON pdfqueue_audit (at);
-- The operator asks whether a batch it no longer finds was purged or erased.
CREATE INDEX IF NOT EXISTS pdfqueue_audit_by_subject ON pdfqueue_audit (subject);

-- The key of the audit trail's address hashes: made once per installation, never shown.
CREATE TABLE IF NOT EXISTS pdfqueue_audit_key (
    only_one  boolean PRIMARY KEY DEFAULT true CHECK (only_one),
    key       bytea NOT NULL
);
