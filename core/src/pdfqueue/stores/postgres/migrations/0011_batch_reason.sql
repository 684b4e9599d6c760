-- Why a batch FAILED, as a bounded code (`no_pdf_members`, `not_a_zip`, ...) beside the human
-- `error`: scripts branch on the code, people read the message. NULL for every other batch.
ALTER TABLE pdfqueue_batches ADD COLUMN IF NOT EXISTS reason text;
