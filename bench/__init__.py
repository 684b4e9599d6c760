"""Benchmarks (not tests): pdfqueue against the seed peer on the same services; `make bench`."""
