"""The worker's arq tasks, one module each; `attempt` holds what they all do around their work."""
