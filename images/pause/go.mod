module pdfqueue.local/pause

go 1.22
