-- The PdfBatch object a batch is bound to (its uid), set once: only that object mirrors the
-- batch, and only its deletion cancels it. NULL for a batch the API created and no object has
-- claimed yet.
ALTER TABLE pdfqueue_batches ADD COLUMN pdfbatch_uid text;

-- Batches the operator created before this column existed: their id is their object's uid.
UPDATE pdfqueue_batches
SET pdfbatch_uid = regexp_replace(id, '^(.{8})(.{4})(.{4})(.{4})(.{12})$', '\1-\2-\3-\4-\5')
WHERE source_key NOT LIKE 'uploads/%' AND id ~ '^[0-9a-f]{32}$';
