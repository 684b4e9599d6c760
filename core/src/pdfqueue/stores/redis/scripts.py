"""The Redis Lua scripts the stores run, shipped in `pdfqueue/stores/redis/lua/`."""

from __future__ import annotations

from importlib import resources


def lua(name: str) -> str:
    """The source of a Redis script shipped in `lua/` beside this module (`name` without .lua)."""
    return resources.files("pdfqueue.stores.redis").joinpath(f"lua/{name}.lua").read_text()
