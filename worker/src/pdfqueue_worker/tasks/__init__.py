"""The worker's arq tasks, one module each; `tries` holds what they all do around their work."""
