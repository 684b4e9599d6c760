"""The operator's `/healthz`, for leader and standby alike (a standby runs no kopf to serve it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)


class HealthServer:
    """GET /healthz: 200 and `report()` as JSON, or 500 and why, when `report` raises."""

    def __init__(self, port: int, report: Callable[[], dict[str, Any]]) -> None:
        self.port = port
        self.report = report
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "0.0.0.0", self.port).start()  # noqa: S104 (the kubelet's probe)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _: web.Request) -> web.Response:
        try:
            body = self.report()
        except Exception as exc:  # what the probe says: a stuck loop, in a word or two
            log.warning("liveness: %s", exc)
            return web.json_response({"error": str(exc)}, status=500)
        return web.json_response(body)
