"""pdfqueue kopf operator."""
