"""pdfqueue kopf operator; importing it registers the handlers (`kopf run -m pdfqueue_operator`)."""

from pdfqueue_operator import handlers as handlers
