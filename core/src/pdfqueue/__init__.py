"""pdfqueue core: the shared library every pdfqueue process builds on."""
