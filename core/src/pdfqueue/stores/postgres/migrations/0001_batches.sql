-- pdfqueue's own tables. The users table belongs to the host application and is never created here.
CREATE TABLE pdfqueue_batches (
    id            text PRIMARY KEY,
    tenant        text NOT NULL,
    source_key    text NOT NULL,
    status        text NOT NULL,
    total_files   integer,
    ignored       integer NOT NULL DEFAULT 0,
    processed     integer NOT NULL DEFAULT 0,
    linked        integer NOT NULL DEFAULT 0,
    skipped_no_match       integer NOT NULL DEFAULT 0,
    skipped_already_exists integer NOT NULL DEFAULT 0,
    failed        integer NOT NULL DEFAULT 0,
    error         text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    completed_at  timestamptz
);

-- One row per ZIP member: the durable per-file report and the guard against double claims.
CREATE TABLE pdfqueue_files (
    batch_id    text NOT NULL REFERENCES pdfqueue_batches (id) ON DELETE CASCADE,
    idx         integer NOT NULL,
    name        text NOT NULL,
    outcome     text NOT NULL,
    reason      text,
    user_id     bigint,
    object_key  text,
    sha256      text,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (batch_id, idx)
);
