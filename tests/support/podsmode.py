"""Whether the real-pod tests run: off, where containers can run (the default), or required."""

from __future__ import annotations

import os

import pytest

OFF = ("0", "no", "false", "off")
ON = ("1", "yes", "true", "on")


def pods_mode(config: pytest.Config) -> str:
    """ "off" (--no-pods, PDFQUEUE_PODS=0), "required" (--pods, PDFQUEUE_PODS=1), else "auto"."""
    env = os.environ.get("PDFQUEUE_PODS", "").strip().lower()
    if config.getoption("--no-pods") or env in OFF:
        return "off"
    if config.getoption("--pods") or env in ON:
        return "required"
    return "auto"
