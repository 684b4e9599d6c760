-- A file naming two different users is not linked: its own counter. OCR is reported per file.
ALTER TABLE pdfqueue_batches ADD COLUMN IF NOT EXISTS skipped_ambiguous integer NOT NULL DEFAULT 0;
ALTER TABLE pdfqueue_files ADD COLUMN IF NOT EXISTS ocr boolean NOT NULL DEFAULT false;
