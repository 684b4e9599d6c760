-- Completion webhooks: where each batch's callback goes, and every delivery attempt.
-- The callback URL an upload named (checked when it was given, and again at each delivery).
CREATE TABLE pdfqueue_callbacks (
    batch_id  text PRIMARY KEY,
    url       text NOT NULL
);

-- One row per delivery attempt: what was answered, or why nothing was.
CREATE TABLE pdfqueue_webhook_deliveries (
    id          bigserial PRIMARY KEY,
    batch_id    text NOT NULL,
    round       integer NOT NULL,
    attempt     integer NOT NULL,
    url         text NOT NULL,
    status_code integer,
    error       text,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pdfqueue_webhook_deliveries_by_batch ON pdfqueue_webhook_deliveries (batch_id, id);
