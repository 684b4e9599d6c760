"""pdfqueue's development tools: sample corpora, the demo, process helpers; never in an image."""
