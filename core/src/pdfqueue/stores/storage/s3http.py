"""The per-PDF S3 calls (ranged GET, PUT, DELETE) as native asyncio HTTP requests."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import hmac
import random
import re
import ssl
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
from botocore.exceptions import BotoCoreError, NoCredentialsError
from botocore.utils import percent_encode
from yarl import URL

from pdfqueue.domain.errors import CertificateRejected, StorageError
from pdfqueue.stores.driver_errors import tls_failure
from pdfqueue.stores.storage.encryption import SSE_HEADER, Encryption
from pdfqueue.stores.storage.s3errors import (
    botocore_error,
    error_code,
    is_throttled,
    is_transient,
    s3_error,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from botocore.credentials import ReadOnlyCredentials

# What botocore's "standard" retry mode retries, and how long it waits in between.
MAX_ATTEMPTS = 3
_ERROR_CODE = re.compile(rb"<Code>([^<]{1,64})</Code>")


def _backoff(attempt: int, *, throttled: bool) -> float:
    """botocore's standard backoff: full jitter, from 50 ms (1 s when throttled), doubling."""
    return random.random() * min((1.0 if throttled else 0.05) * 2.0 ** (attempt - 1), 20.0)  # noqa: S311


class SigV4:
    """S3's Signature Version 4 for the three requests made here: header auth, no query
    string, a path already percent-encoded as botocore encodes a Key, and the body's SHA-256
    (the caller's digest when it has one; S3 refuses a body that does not match it).

    Why not botocore's `S3SigV4Auth`, which it replaces here and against which
    `tests/unit/test_s3_signing.py` checks every signature: that signer serves any request
    (queries, presigning, checksum modes, header filtering) and derives the signing key
    again for each call. On a worker's event loop it was a fifth of the CPU, 0.05 ms per
    PUT on an idle core; this is a tenth of that. Credentials still come from botocore's
    provider chain for each request, so rotated ones apply.
    """

    def __init__(self, region: str) -> None:
        self.region = region
        self._key: tuple[str, str, bytes] = ("", "", b"")
        """(secret key, date, signing key): the key changes with the day or the secret."""

    def headers(
        self,
        credentials: ReadOnlyCredentials,
        method: str,
        *,
        host: str,
        path: str,
        headers: dict[str, str],
        payload_sha256: str,
        now: datetime.datetime | None = None,
    ) -> dict[str, str]:
        """`headers` with Host, the x-amz ones and Authorization, ready to send."""
        stamp = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y%m%dT%H%M%SZ")
        signed = {"Host": host, **headers}
        signed["X-Amz-Date"] = stamp
        signed["X-Amz-Content-SHA256"] = payload_sha256
        if credentials.token:
            signed["X-Amz-Security-Token"] = credentials.token
        canonical = sorted((k.lower(), " ".join(v.split())) for k, v in signed.items())
        names = ";".join(k for k, _ in canonical)
        request = "\n".join(
            (
                method,
                path or "/",
                "",  # no query string
                *(f"{k}:{v}" for k, v in canonical),
                "",
                names,
                payload_sha256,
            )
        )
        scope = f"{stamp[:8]}/{self.region}/s3/aws4_request"
        digest = hashlib.sha256(request.encode()).hexdigest()
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{digest}"
        key = self._signing_key(credentials.secret_key or "", stamp[:8])
        signature = hmac.new(key, to_sign.encode(), "sha256").hexdigest()
        signed["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={names}, Signature={signature}"
        )
        return signed

    def _signing_key(self, secret: str, day: str) -> bytes:
        if self._key[:2] != (secret, day):
            key = f"AWS4{secret}".encode()
            for part in (day, self.region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), "sha256").digest()
            self._key = (secret, day, key)
        return self._key[2]


def host_header(url: str) -> str:
    """The Host header for `url`, as botocore signs it: lowercase, an IPv6 address in
    brackets, the port only when it is not the scheme's default."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    if parts.port is not None and parts.port != {"http": 80, "https": 443}.get(parts.scheme):
        host = f"{host}:{parts.port}"
    return host


@dataclass(frozen=True)
class Endpoint:
    """Where the bucket's objects are, as the boto3 client resolves it (worked out once)."""

    url: str
    """The objects' base URL (ending in "/"); a key's encoded path follows it."""
    host: str
    """The Host header of `url`, as signed."""
    path: str
    """The path of `url`, as signed."""

    @classmethod
    def of(cls, url: str) -> Endpoint:
        return cls(url, host_header(url), urlsplit(url).path)


class AsyncS3:
    """Ranged GET, PUT and DELETE of one bucket and prefix over a long-lived aiohttp session.

    Why this exists: profiled on a worker, botocore's per-call machinery (event hooks,
    serialisation, endpoint rules, urllib3) plus the hop to a thread took ~35% of the CPU,
    for the two calls every PDF makes. Here a call is a signed HTTP request on the event
    loop: ~0.4 ms of CPU instead of ~1.5 ms (`python -m bench.storage_calls`).

    It keeps the boto3 client's behaviour: its endpoint and addressing style, credentials
    (read again for each request, so rotated ones apply), region, SigV4 with a hashed
    payload, timeouts, standard-mode retries and the error mapping of `S3Backend._call`.
    Everything else (bucket checks, HEAD, multipart uploads) stays on boto3, whose cost
    does not matter there.

    The session is created by the first call and belongs to that event loop; `aclose` ends it.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        prefix: str,
        *,
        connections: int,
        ca_file: str | None = None,
        encryption: Encryption | None = None,
    ) -> None:
        self.client = client
        self.encryption = encryption or Encryption()
        self.tls = ssl.create_default_context(cafile=ca_file)
        """As boto3 verifies: the certificate against `ca_file` (else the system's CAs) and
        the endpoint's host name."""
        self.bucket = bucket
        self.prefix = prefix
        self.connections = connections
        self._endpoint: Endpoint | None = None
        self._signer = SigV4(client.meta.region_name)
        self._session: aiohttp.ClientSession | None = None

    async def read_range(self, key: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        headers = {"Range": f"bytes={start}-{start + length - 1}"}
        status, _, data = await self._request("GET", key, headers=headers)
        # 206 as asked; a server that ignores Range answers 200 with the whole object
        return data[start : start + length] if status == 200 else data

    async def put(
        self, key: str, data: bytes, sha256: str | None = None, tenant: str | None = None
    ) -> None:
        """Store `data`, encrypted as configured (with `tenant`'s KMS key if it has one)."""
        headers = {"Content-Type": "application/pdf", **self.encryption.headers(tenant)}
        _, answer, _ = await self._request("PUT", key, body=data, headers=headers, sha256=sha256)
        self.encryption.require(answer.get(SSE_HEADER), key)

    async def delete(self, key: str) -> None:
        await self._request("DELETE", key)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _resolved(self) -> Endpoint:
        if self._endpoint is None:
            # The client's own endpoint resolution (path or virtual-host style, custom endpoint)
            # for this bucket, done once: presigning only builds a URL, nothing is sent.
            probe = "probe"
            try:
                url: str = self.client.generate_presigned_url(
                    "get_object", Params={"Bucket": self.bucket, "Key": probe}
                )
            except BotoCoreError as exc:
                raise botocore_error(exc) from exc
            self._endpoint = Endpoint.of(url.split("?", 1)[0].removesuffix(probe))
        return self._endpoint

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self.connections, ssl=self.tls),
                # as the boto3 Config: 2 s to connect, 15 s between bytes read
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=2, sock_read=15),
                auto_decompress=False,  # object bytes as stored, as boto3 returns them
            )
        return self._session

    async def _credentials(self) -> ReadOnlyCredentials:
        """The client's current credentials, from its provider chain (static keys, a web
        identity token, the container-credentials endpoint of EKS Pod Identity or ECS...).

        Credentials that expire are refreshed by botocore inside `get_frozen_credentials`,
        15 minutes before their end, with an HTTP call to their provider: that call runs
        on a thread, never on the event loop every PDF shares.
        """
        credentials = self.client._get_credentials()
        if credentials is None:
            raise botocore_error(NoCredentialsError())
        refresh_needed = getattr(credentials, "refresh_needed", None)
        try:
            if refresh_needed is not None and refresh_needed():
                frozen: ReadOnlyCredentials = await asyncio.to_thread(
                    credentials.get_frozen_credentials
                )
                return frozen
            frozen = credentials.get_frozen_credentials()
        except BotoCoreError as exc:  # the provider did not answer, or refused
            raise botocore_error(exc) from exc
        return frozen

    def _sign(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        *,
        credentials: ReadOnlyCredentials,
        sha256: str | None,
    ) -> dict[str, str]:
        digest = sha256 or hashlib.sha256(body).hexdigest()
        host = self._resolved().host
        return self._signer.headers(
            credentials, method, host=host, path=path, headers=headers, payload_sha256=digest
        )

    async def _request(
        self,
        method: str,
        key: str,
        *,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        sha256: str | None = None,
    ) -> tuple[int, Mapping[str, str], bytes]:
        """Status, headers and body of a 2xx answer; retries what botocore retries, then
        raises."""
        endpoint = self._resolved()
        encoded: str = percent_encode(self.prefix + key, safe="/~")  # as botocore encodes a Key
        url, path = endpoint.url + encoded, endpoint.path + encoded
        attempt = 0
        while True:
            attempt += 1
            credentials = await self._credentials()
            signed = self._sign(
                method, path, body, headers or {}, credentials=credentials, sha256=sha256
            )
            try:
                async with self._http().request(
                    method, URL(url, encoded=True), data=body or None, headers=signed
                ) as response:
                    status, answer, data = response.status, response.headers, await response.read()
            except aiohttp.ClientSSLError as exc:  # no retry cures a certificate
                raise CertificateRejected("S3", tls_failure(exc) or str(exc)) from exc
            except (aiohttp.ClientError, TimeoutError) as exc:
                if attempt < MAX_ATTEMPTS:
                    await asyncio.sleep(_backoff(attempt, throttled=False))
                    continue
                raise StorageError(f"S3 unreachable: {type(exc).__name__}: {exc}") from exc
            if status < 300:
                return status, answer, data
            found = _ERROR_CODE.search(data)
            code = error_code(found.group(1).decode(errors="replace") if found else "", status)
            if attempt < MAX_ATTEMPTS and is_transient(status, code):
                await asyncio.sleep(_backoff(attempt, throttled=is_throttled(status, code)))
                continue
            raise s3_error(status, code, key, f"{method} {key}")
