-- The arq queue a batch's work goes to: a batch whose Redis state is lost is rebuilt into its
-- own queue only (pdfqueue.recovery). NULL for batches created before this column: any.
ALTER TABLE pdfqueue_batches ADD COLUMN IF NOT EXISTS queue_name text;
