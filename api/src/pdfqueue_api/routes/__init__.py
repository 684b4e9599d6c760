"""The HTTP routes, one router per resource; `pdfqueue_api.app` includes them."""
