"""The per-PDF S3 calls are signed exactly as botocore's own S3 signer signs them."""

from __future__ import annotations

import datetime
import hashlib
from typing import NamedTuple

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials, ReadOnlyCredentials

from pdfqueue.stores.storage.s3http import SigV4, host_header

BODY = b"%PDF-1.7\n" + bytes(range(256)) * 40
NOW = datetime.datetime(2026, 11, 30, 16, 0, 0)
KEY = Credentials("AKIDEXAMPLE", "secret/key").get_frozen_credentials()
TOKEN = Credentials("AKIDEXAMPLE", "secret/key", "session+token==").get_frozen_credentials()


class Request(NamedTuple):
    """One request as both signers see it."""

    credentials: ReadOnlyCredentials
    method: str
    url: str
    body: bytes = b""
    headers: dict[str, str] = {}  # noqa: RUF012 (never changed)
    now: datetime.datetime = NOW


def botocore_signed(monkeypatch: pytest.MonkeyPatch, r: Request) -> dict[str, str]:
    """The headers botocore's S3 signer sends for this request."""
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: r.now)
    request = AWSRequest(method=r.method, url=r.url, data=r.body, headers=r.headers)
    S3SigV4Auth(r.credentials, "s3", "eu-west-1").add_auth(request)
    return dict(request.headers.items())


def ours(signer: SigV4, r: Request) -> dict[str, str]:
    return signer.headers(
        r.credentials,
        r.method,
        host=host_header(r.url),
        path="/" + r.url.split("/", 3)[3],
        headers=r.headers,
        payload_sha256=hashlib.sha256(r.body).hexdigest(),
        now=r.now,
    )


@pytest.mark.parametrize(
    ("method", "url", "body", "headers", "credentials"),
    [
        (
            "PUT",
            "http://127.0.0.1:7070/pdfqueue/p/pdfs/7/a%20b%2B%C3%A9~.pdf",
            BODY,
            {"Content-Type": "application/pdf"},
            KEY,
        ),
        (
            "PUT",
            "https://pdfqueue.s3.eu-west-1.amazonaws.com/p/pdfs/7/x.pdf",
            BODY,
            {"Content-Type": "application/pdf"},
            TOKEN,
        ),
        ("GET", "http://[::1]:7070/pdfqueue/p/uploads/u.zip", b"", {"Range": "bytes=0-9"}, KEY),
        ("GET", "http://S3.Example.com:80/pdfqueue/u.zip", b"", {"Range": "bytes=5-99"}, TOKEN),
        ("DELETE", "https://s3.example.com:443/pdfqueue/p/pdfs/7/x.pdf", b"", {}, TOKEN),
        ("DELETE", "https://s3.example.com:8443/pdfqueue/p/pdfs/7/x.pdf", b"", {}, KEY),
    ],
)
def test_the_signature_is_botocores(
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    url: str,
    body: bytes,
    headers: dict[str, str],
    credentials: ReadOnlyCredentials,
) -> None:
    request = Request(credentials, method, url, body, headers)
    expected = botocore_signed(monkeypatch, request)
    signed = ours(SigV4("eu-west-1"), request)
    assert signed.pop("Host") == (
        url.split("/")[2].lower().removesuffix(":80").removesuffix(":443")
    )
    assert signed == expected
    assert signed["X-Amz-Content-SHA256"] == hashlib.sha256(body).hexdigest()


def test_the_signing_key_follows_the_day_and_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key is kept between requests: a new day or a rotated secret must not reuse it."""
    signer = SigV4("eu-west-1")
    url = "http://127.0.0.1:7070/pdfqueue/p/pdfs/7/x.pdf"
    rotated = Credentials("AKIDOTHER", "another/secret").get_frozen_credentials()
    tomorrow = NOW + datetime.timedelta(days=1)
    for credentials, now in ((KEY, NOW), (KEY, tomorrow), (rotated, tomorrow), (KEY, NOW)):
        request = Request(credentials, "PUT", url, BODY, {}, now)
        expected = botocore_signed(monkeypatch, request)
        signed = ours(signer, request)
        assert signed["Authorization"] == expected["Authorization"]


def test_a_body_that_is_not_the_signed_one_changes_the_signature() -> None:
    url = "http://127.0.0.1:7070/pdfqueue/p/pdfs/7/x.pdf"
    signer = SigV4("eu-west-1")
    one = ours(signer, Request(KEY, "PUT", url, BODY))
    other = ours(signer, Request(KEY, "PUT", url, BODY + b" "))
    assert one["Authorization"] != other["Authorization"]
