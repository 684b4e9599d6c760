"""The end-to-end scenario and its cluster drivers (kind for `--e2e`, local processes for CI)."""
