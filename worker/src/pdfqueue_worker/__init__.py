"""pdfqueue arq worker."""
