"""The Redis Lua scripts the stores run, shipped in `pdfqueue/stores/lua/`."""

from __future__ import annotations

from importlib import resources


def lua(name: str) -> str:
    """The source of a Redis script shipped in `pdfqueue/stores/lua/` (`name` without .lua)."""
    return resources.files("pdfqueue.stores").joinpath(f"lua/{name}.lua").read_text()
