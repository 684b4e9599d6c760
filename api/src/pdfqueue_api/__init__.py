"""pdfqueue HTTP API."""
