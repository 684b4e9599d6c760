"""How a setting's text becomes a value, where pydantic's own parsing does not fit."""

from __future__ import annotations


def entries(value: str) -> list[str]:
    """The entries of a comma-separated variable, stripped, empty ones left out."""
    return [entry for entry in (e.strip() for e in value.split(",")) if entry]
