"""Unit tests: pure logic, no Redis, PostgreSQL, S3 or Kubernetes (they pass with all stopped)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def services() -> dict[str, str]:
    """Overrides the suite's: a unit test that reaches for a service fails at once, by name."""
    pytest.fail("a unit test asked for the services; it belongs outside tests/unit")
