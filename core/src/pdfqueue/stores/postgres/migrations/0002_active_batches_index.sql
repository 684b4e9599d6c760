-- The concurrent-batches quota counts a tenant's batches that are not terminal yet: this
-- index holds only those, so the count stays cheap however many finished batches there are.
CREATE INDEX pdfqueue_batches_active ON pdfqueue_batches (tenant)
    WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED');
