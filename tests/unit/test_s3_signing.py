"""The per-PDF S3 calls are signed exactly as botocore's own S3 signer signs them."""

from __future__ import annotations

import datetime
import hashlib

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from pdfqueue.stores.storage.s3http import BodySigV4

BODY = b"%PDF-1.7\n" + bytes(range(256)) * 40


@pytest.mark.parametrize(
    ("method", "url", "body", "token"),
    [
        ("PUT", "http://127.0.0.1:7070/pdfqueue/p/pdfs/7/a%20b.pdf", BODY, None),
        ("PUT", "https://pdfqueue.s3.eu-west-1.amazonaws.com/p/pdfs/7/x.pdf", BODY, "session"),
        ("GET", "http://127.0.0.1:7070/pdfqueue/p/uploads/u.zip", b"", None),
        ("DELETE", "https://s3.example.com/pdfqueue/p/pdfs/7/x.pdf", b"", "session"),
    ],
)
def test_the_signature_is_botocores(
    monkeypatch: pytest.MonkeyPatch, method: str, url: str, body: bytes, token: str | None
) -> None:
    now = datetime.datetime(2026, 11, 30, 16, 0, 0)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now)
    credentials = Credentials("AKIDEXAMPLE", "secret/key", token).get_frozen_credentials()

    def signed(auth: S3SigV4Auth) -> dict[str, str]:
        headers = {"Content-Type": "application/pdf", "Range": "bytes=0-9"}
        request = AWSRequest(method=method, url=url, data=body, headers=headers)
        auth.add_auth(request)
        return dict(request.headers.items())

    ours = signed(BodySigV4(credentials, "eu-west-1", body))
    assert ours == signed(S3SigV4Auth(credentials, "s3", "eu-west-1"))
    assert ours["X-Amz-Content-SHA256"] == hashlib.sha256(body).hexdigest()


def test_a_digest_the_caller_has_is_signed_as_if_hashed_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = datetime.datetime(2026, 11, 30, 16, 0, 0)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now)
    credentials = Credentials("AKIDEXAMPLE", "secret/key").get_frozen_credentials()
    url = "http://127.0.0.1:7070/pdfqueue/p/pdfs/7/x.pdf"

    def signed(auth: S3SigV4Auth) -> dict[str, str]:
        request = AWSRequest(method="PUT", url=url, data=BODY, headers={})
        auth.add_auth(request)
        return dict(request.headers.items())

    digest = hashlib.sha256(BODY).hexdigest()
    assert signed(BodySigV4(credentials, "eu-west-1", BODY, digest)) == signed(
        BodySigV4(credentials, "eu-west-1", BODY)
    )
