"""A small HTTP client for the pdfqueue API, used by the CLI and the demo."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

CHUNK = 1024 * 1024


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Client:
    def __init__(self, url: str, token: str | None, *, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)

    def _check(self, response: httpx.Response) -> Any:
        if response.is_error:
            try:
                message = response.json().get("detail", response.text)
            except ValueError:
                message = response.text
            raise ApiError(response.status_code, str(message))
        return response.json() if response.content else None

    def upload(self, path: Path, progress: Any = None) -> dict[str, Any]:
        """Stream a ZIP as a raw `application/zip` body; `progress(n)` sees each chunk sent."""

        def chunks() -> Iterator[bytes]:
            with path.open("rb") as fh:
                while chunk := fh.read(CHUNK):
                    if progress:
                        progress(len(chunk))
                    yield chunk

        headers = {"Content-Type": "application/zip", "Content-Length": str(path.stat().st_size)}
        response = self.http.post("/v1/batches", content=chunks(), headers=headers)
        result: dict[str, Any] = self._check(response)
        return result

    def status(self, batch_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._check(self.http.get(f"/v1/batches/{batch_id}"))
        return result

    def files(self, batch_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._check(self.http.get(f"/v1/batches/{batch_id}/files"))
        return result

    def cancel(self, batch_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._check(self.http.delete(f"/v1/batches/{batch_id}"))
        return result

    def close(self) -> None:
        self.http.close()
