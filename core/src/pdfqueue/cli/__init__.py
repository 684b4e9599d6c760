"""The `pdfqueue` command and its HTTP client."""
