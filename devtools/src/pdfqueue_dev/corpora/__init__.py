"""Corpora of PDFs that the tests and the bench both read, generated from a seed.

- `samples`: the sparse fpdf2 résumés, their users, and the ZIP writer (the tests' corpus).
- `documents`: dense résumés from three producers (fpdf2, reportlab, a pdfTeX-like layout).
- `labelled`: the labelled corpus: addresses placed where real résumés put them, scans for OCR.
- `libreoffice`, `ghostscript`: the same résumés written as PDF by LibreOffice and Ghostscript.
- `rawpdf`: a PDF assembled object by object (for layouts no library writes).
"""
