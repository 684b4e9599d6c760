"""A small HTTP client for the pdfqueue API, used by the CLI and the demo."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from pdfqueue.domain.errors import PdfQueueError, PermanentError

CHUNK = 1024 * 1024
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


class ApiError(PdfQueueError):
    """The API (or whatever answered at the URL) refused a request; `str()` says it in words."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        retry_after_s: str | None = None,
    ) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.detail = message
        self.errors = errors or []
        """A 422's misfit parameters, as the API lists them beside `detail`."""
        self.retry_after_s = retry_after_s


class NotAZip(PermanentError):
    """The file to upload is missing, unreadable or is not a ZIP: refused before anything
    is sent."""


class MissingToken(PermanentError):
    """No token was given (`--token`, PDFQUEUE_TOKEN): refused before anything is sent."""


class Client:
    def __init__(self, url: str, token: str | None, *, timeout_s: float = 30.0) -> None:
        """Raises MissingToken without a token: every route but health needs one, and an
        API that runs open (PDFQUEUE_ALLOW_ANONYMOUS) takes any."""
        if not token or not token.strip():
            raise MissingToken("no token")
        self.url = url.rstrip("/")
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s
        )

    def _check(self, response: httpx.Response) -> Any:
        body = _json_of(response)
        if response.is_error:
            detail = body.get("detail") if isinstance(body, dict) else None
            if isinstance(detail, list):  # an older API's validation list: its messages
                detail = "; ".join(str(e.get("msg", e)) for e in detail if isinstance(e, dict))
            if not isinstance(detail, str) or detail in {"Not Found", "Method Not Allowed"}:
                detail = _not_api(self.url)  # another server, or a URL not the API's root
            errors = body.get("errors") if isinstance(body, dict) else None
            raise ApiError(
                response.status_code,
                detail,
                errors=errors if isinstance(errors, list) else None,
                retry_after_s=response.headers.get("retry-after"),
            )
        if not response.content:
            return None
        if body is None:
            raise ApiError(response.status_code, _not_api(self.url))
        return body

    def upload(self, path: Path, progress: Callable[[int], object] | None = None) -> dict[str, Any]:
        """Stream a ZIP as a raw `application/zip` body; `progress(n)` sees each chunk sent."""
        check_zip(path)

        def chunks() -> Iterator[bytes]:
            with path.open("rb") as fh:
                while chunk := fh.read(CHUNK):
                    if progress:
                        progress(len(chunk))
                    yield chunk

        headers = {"Content-Type": "application/zip", "Content-Length": str(path.stat().st_size)}
        response = self.http.post(
            "/v1/batches", content=chunks(), headers=headers, params={"name": path.name}
        )
        result: dict[str, Any] = self._check(response)
        return result

    def status(self, batch_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._check(self.http.get(f"/v1/batches/{batch_id}"))
        return result

    def batches(self, limit: int = 20, cursor: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        result: dict[str, Any] = self._check(self.http.get("/v1/batches", params=params))
        return result

    def files(self, batch_id: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._check(self.http.get(f"/v1/batches/{batch_id}/files"))
        return result

    def cancel(self, batch_id: str) -> dict[str, Any]:
        result: dict[str, Any] = self._check(self.http.delete(f"/v1/batches/{batch_id}"))
        return result

    def erase(self, batch_id: str) -> tuple[dict[str, Any], int]:
        """Erase the batch; the answer, and the seconds to wait before asking again while it
        waits for the batch's last jobs (0 when done)."""
        response = self.http.delete(f"/v1/batches/{batch_id}", params={"erase": "true"})
        result: dict[str, Any] = self._check(response)
        return result, int(response.headers.get("Retry-After", "0"))

    def retry(self, batch_id: str, *, all_failed: bool = False) -> dict[str, Any]:
        """Re-run the batch's failed files (transient ones unless `all_failed`)."""
        params = {"all_failed": "true"} if all_failed else {}
        url = f"/v1/batches/{batch_id}/retry"
        result: dict[str, Any] = self._check(self.http.post(url, params=params))
        return result

    def events(self, batch_id: str, last_id: str | None = None) -> Iterator[tuple[str, Any]]:
        """(event id, batch summary) from the batch's event stream until the server ends it."""
        headers = {"Last-Event-ID": last_id} if last_id else {}
        timeout = httpx.Timeout(10.0, read=60.0)  # the server sends a comment every 15 s
        url = f"/v1/batches/{batch_id}/events"
        with self.http.stream("GET", url, headers=headers, timeout=timeout) as response:
            if response.status_code == httpx.codes.NO_CONTENT:
                return
            if response.is_error:
                response.read()
                self._check(response)
            fields: dict[str, str] = {}
            for line in response.iter_lines():
                if line:
                    if not line.startswith(":"):
                        name, _, value = line.partition(":")
                        fields[name] = value.removeprefix(" ")
                    continue
                if fields.get("event") == "status":
                    try:
                        update = json.loads(fields.get("data", ""))
                    except ValueError as exc:  # a proxy's page, not our stream
                        raise ApiError(response.status_code, _not_api(self.url)) from exc
                    yield fields.get("id", ""), update
                fields = {}

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_zip(path: Path) -> None:
    """Refuse, before sending a byte, a path that is not a readable regular ZIP file; the
    message says what it is instead and what to do."""
    zipped = f"zip it first (`zip -r {path.name}.zip {path}`) and upload the ZIP"
    if path.is_dir():
        msg = f"{path} is a directory, not a ZIP archive: {zipped}"
        raise NotAZip(msg)
    if not path.exists():
        msg = f"{path}: no such file (check the path; `ls {path.parent}` lists what is there)"
        raise NotAZip(msg)
    if not path.is_file():
        msg = f"{path} is not a regular file (a device, a pipe or a socket): upload a ZIP file"
        raise NotAZip(msg)
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        msg = f"cannot read {path}: {exc.strerror or exc} (check its permissions)"
        raise NotAZip(msg) from exc
    if head not in ZIP_MAGIC:
        msg = (
            f"{path} is not a ZIP archive (it does not start with a ZIP signature):"
            f" put the PDFs in a ZIP (`zip resumes.zip *.pdf`) and upload that"
        )
        raise NotAZip(msg)


def _json_of(response: httpx.Response) -> Any:
    """The answer's JSON, or None when it is not JSON (another server, a proxy's page)."""
    if not response.headers.get("content-type", "").startswith("application/json"):
        return None
    try:
        return response.json()
    except ValueError:  # says JSON, is not
        return None


def _not_api(url: str) -> str:
    return f"{url} does not look like a pdfqueue API (check --url or PDFQUEUE_URL)"
