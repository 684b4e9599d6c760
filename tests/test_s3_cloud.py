"""S3 the way clouds run it: every object encrypted at rest, and credentials that rotate.

Server-side encryption against MinIO with a KMS key (`MINIO_KMS_SECRET_KEY`): a batch's
uploaded ZIP (boto3's multipart upload) and its linked PDFs (the native per-PDF PUT) are
each stored encrypted as PDFQUEUE_S3_SSE asks, SSE-S3 or SSE-KMS, with the tenant's own key
where it has one; a key the store does not have, and a store that ignores the header (the
suite's versitygw), stop a process at start with one line naming the key and the cause.

Rotating credentials against versitygw holding the accounts (its internal IAM): the
container-credentials endpoint that EKS Pod Identity and ECS give a pod is served here and
hands out a new account five times a second, revoking each 0.6 s after it was handed out;
an upload streamed slowly and a batch both write through the rotations, with no static key
anywhere in the environment.

A web identity token file, as IAM roles for service accounts give a pod: versitygw's own
IAM service is the STS that exchanges it (AssumeRoleWithWebIdentity against an OpenID
Connect issuer it trusts, whose keys it fetches), and a batch is written on both paths with
the temporary credentials and session token it returns.

What each stands for: S3's SSE-S3 and SSE-KMS (`x-amz-server-side-encryption`, the key id
header; the answer to a PUT names the algorithm, a HEAD names it for any object, and
S3 answers a key it cannot use with a `KMS.*` error); and botocore's container provider
(`AWS_CONTAINER_CREDENTIALS_FULL_URI`, `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`, credentials
refreshed 15 minutes before their `Expiration`), as EKS Pod Identity's agent serves it; and
its web identity provider (`AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN`, STS's answer of an
ASIA key, a secret and a session token), as IRSA sets it up.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import hashlib
import json
import os
import secrets
import ssl
import subprocess
import threading
import time
import zipfile
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import httpx
import jwt
import pytest
import trustme
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from pdfqueue.domain.errors import EncryptionRefused
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.preflight import start_refused
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.corpora.samples import build_corpus, seed_users, write_zip
from pdfqueue_dev.processes import free_port
from tests.security.test_sec_api import serve
from tests.support.helpers import ACME, GLOBEX, upload
from tests.support.servers import json_server, serving

TOOLS = Path(os.environ.get("PDFQUEUE_TOOLS_CACHE", "/var/cache/pdfqueue-tools")) / "bin"
KMS_KEY = "pdfqueue-key"
"""The one key MinIO's static KMS holds (`MINIO_KMS_SECRET_KEY=<name>:<key>`)."""


def _suite_keys() -> tuple[str, str]:
    return os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]


@pytest.fixture(scope="module")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """MinIO with a static KMS key, the suite's keys as its root account; its endpoint."""
    folder = tmp_path_factory.mktemp("minio")
    port = free_port()
    access, secret = _suite_keys()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(folder),
        "MINIO_ROOT_USER": access,
        "MINIO_ROOT_PASSWORD": secret,
        "MINIO_KMS_SECRET_KEY": f"{KMS_KEY}:{base64.b64encode(os.urandom(32)).decode()}",
        "MINIO_BROWSER": "off",
    }
    argv = [str(TOOLS / "minio"), "server", "--quiet", "--address", f"127.0.0.1:{port}"]
    with serving([*argv, str(folder / "data")], port, folder / "minio.log", env):
        yield f"http://127.0.0.1:{port}"


def _on(settings: Settings, **changes: Any) -> Settings:
    """`settings` with `changes`, validated as the process would read them."""
    return Settings(**{**settings.model_dump(), **changes})


def _objects(settings: Settings) -> dict[str, dict[str, Any]]:
    """Every object under the test's prefix and what a HEAD says of its encryption."""
    client = boto3.client("s3", endpoint_url=settings.s3_endpoint_url, region_name="us-east-1")
    prefix = settings.storage_url.removeprefix("s3://pdfqueue/") + "/"
    found = client.list_objects_v2(Bucket="pdfqueue", Prefix=prefix).get("Contents", [])
    heads = {o["Key"]: client.head_object(Bucket="pdfqueue", Key=o["Key"]) for o in found}
    return {
        key.removeprefix(prefix): {
            "sse": head.get("ServerSideEncryption"),
            "key": head.get("SSEKMSKeyId"),
        }
        for key, head in heads.items()
    }


async def _bucket(settings: Settings) -> None:
    storage = Storage.from_settings(settings, threads=1)
    await storage.ensure_bucket()
    await storage.aclose()


@contextlib.asynccontextmanager
async def api_on(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The real ASGI app on `settings` (its bucket made first), with acme's token."""
    await _bucket(settings)
    async with serve(settings, **ACME) as client:
        yield client


async def _run_worker(settings: Settings) -> None:
    from pdfqueue_worker.app import build_worker

    worker = build_worker(settings, burst=True, handle_signals=False)
    try:
        await worker.main()
    finally:
        await worker.close()


@pytest.mark.parametrize(
    ("asked", "algorithm"),
    [
        pytest.param({"s3_sse": "sse-s3"}, "AES256", id="sse-s3"),
        pytest.param({"s3_sse": "sse-kms", "s3_sse_kms_key_id": KMS_KEY}, "aws:kms", id="kms"),
    ],
)
async def test_every_object_a_batch_writes_is_encrypted_on_both_paths(
    asked: dict[str, str],
    algorithm: str,
    settings: Settings,
    minio: str,
    db: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    on = _on(settings, s3_endpoint_url=minio, **asked)
    await _bucket(on)
    assert not await asyncio.to_thread(start_refused, on, "worker"), (
        capsys.readouterr().err
    )  # the probe passes
    corpus = build_corpus(40, seed=31)
    await seed_users(db, corpus.users, table=on.users_table)
    async with api_on(on) as api:
        batch_id = await upload(api, write_zip(corpus, tmp_path / "b.zip", seed=31))
        await _run_worker(on)
        status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert {k: status[k] for k in corpus.counts()} == corpus.counts()
    objects = _objects(on)
    pdfs = [k for k in objects if k.startswith("pdfs/")]
    assert len(pdfs) == corpus.counts()["linked"] > 0
    assert f"uploads/{batch_id}.zip" in objects  # the multipart upload: boto3's path
    assert {o["sse"] for o in objects.values()} == {algorithm}  # and every PDF: the native PUT
    if algorithm == "aws:kms":
        assert {o["key"] for o in objects.values()} == {f"arn:aws:kms:{KMS_KEY}"}


async def test_a_tenant_of_its_own_key_writes_with_it_and_only_with_it(
    settings: Settings, minio: str, db: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """acme's key is the one MinIO holds; the installation's (everybody else's) is not: acme's
    batch can only be stored if both paths pick acme's key, globex's upload cannot be."""
    on = _on(
        settings,
        s3_endpoint_url=minio,
        s3_sse="sse-kms",
        s3_sse_kms_key_id="no-such-key",
        s3_sse_tenant_kms_key_ids={"acme": KMS_KEY},
    )
    await _bucket(on)
    # the probe names the installation's key, which the store does not have
    assert await asyncio.to_thread(start_refused, on, "worker")
    refused = capsys.readouterr().err.strip()
    assert refused.startswith("pdfqueue worker: refusing to start: storage: server-side")
    assert "KMS key no-such-key" in refused
    assert "kms:KeyNotFound" in refused
    assert len(refused.splitlines()) == 1

    corpus = build_corpus(20, seed=32)
    await seed_users(db, corpus.users, table=on.users_table)
    async with api_on(on) as api:
        zip_path = write_zip(corpus, tmp_path / "b.zip", seed=32)
        batch_id = await upload(api, zip_path)
        await _run_worker(on)
        status = (await api.get(f"/v1/batches/{batch_id}")).json()
        theirs = await api.post(
            "/v1/batches",
            content=zip_path.read_bytes(),
            headers={**GLOBEX, "Content-Type": "application/zip"},
        )
    assert status["status"] == "COMPLETED"
    assert {k: status[k] for k in corpus.counts()} == corpus.counts()
    objects = _objects(on)
    assert {o["key"] for o in objects.values()} == {f"arn:aws:kms:{KMS_KEY}"}
    assert sum(1 for k in objects if k.startswith("pdfs/")) == corpus.counts()["linked"]
    assert theirs.status_code == 500, theirs.text  # the deployment's to fix, said so
    assert "encryption" in theirs.json()["detail"]
    assert len([k for k in objects if k.startswith("uploads/")]) == 1  # globex's: nothing kept


async def test_a_store_that_ignores_the_header_is_refused_on_both_paths(
    settings: Settings, storage: Storage, capsys: pytest.CaptureFixture[str]
) -> None:
    """versitygw keeps no encryption: nothing may be written to it as if it did."""
    on = _on(settings, s3_sse="sse-s3")
    assert await asyncio.to_thread(start_refused, on, "api")
    refused = capsys.readouterr().err
    assert "server-side encryption AES256 not applied" in refused
    assert "did not say so" in refused
    ignoring = Storage.from_settings(on, threads=1)
    try:
        with pytest.raises(EncryptionRefused):
            await ignoring.put("pdfs/1/x.pdf", b"%PDF-1.4 x")  # the native PUT
        sink = await ignoring.begin_upload("uploads/x.zip")  # boto3's multipart upload
        await ignoring.run(sink.write_part, b"PK\x03\x04 x")
        with pytest.raises(EncryptionRefused):
            await ignoring.run(sink.complete)
    finally:
        await ignoring.aclose()


# --- credentials that rotate --------------------------------------------------------------

PERIOD_S = 0.2
"""How often the endpoint hands out a new account: several times in the shortest batch."""
REVOKE_AFTER_S = 3 * PERIOD_S
"""An account is deleted from the gateway this long after it was handed out."""
REFRESH_AHEAD_S = 15 * 60
"""botocore refreshes credentials this long before their `Expiration`: the endpoint states
an expiry that far plus PERIOD_S ahead, so that botocore asks again after PERIOD_S."""


def _admin(
    endpoint: str, root: tuple[str, str], action: str, *, body: bytes = b"", query: str = ""
) -> None:
    """One call of versitygw's admin API (`PATCH /create-user`...), signed by its root."""
    url = f"{endpoint}/{action}" + (f"?{query}" if query else "")
    digest = hashlib.sha256(body).hexdigest()
    request = AWSRequest("PATCH", url, data=body, headers={"X-Amz-Content-Sha256": digest})
    SigV4Auth(Credentials(*root), "s3", "us-east-1").add_auth(request)
    answer = httpx.request("PATCH", url, content=body, headers=dict(request.headers))
    assert answer.status_code < 300, answer.text


@dataclass
class RotatingAccounts:
    """The container-credentials endpoint: a new versitygw account every PERIOD_S, each
    revoked REVOKE_AFTER_S after it was handed out; it answers only the token in the file."""

    gateway: str
    root: tuple[str, str]
    """The gateway's root account, which creates and deletes the others."""
    token_file: Path
    handed: list[tuple[str, float]] = field(default_factory=list)
    """(access key, when) of each account handed out, in order."""
    revoked: list[str] = field(default_factory=list)
    secrets: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def current(self) -> dict[str, str]:
        with self.lock:
            if not self.handed or time.monotonic() - self.handed[-1][1] >= PERIOD_S:
                access = f"rot{len(self.handed)}{secrets.token_hex(4)}"
                self.secrets[access] = secrets.token_hex(16)
                account = (
                    f"<Account><Access>{access}</Access><Secret>{self.secrets[access]}</Secret>"
                    # admin: the bucket is the root's, and only the admin role reaches others'
                    "<Role>admin</Role></Account>"
                )
                _admin(self.gateway, self.root, "create-user", body=account.encode())
                self.handed.append((access, time.monotonic()))
            access = self.handed[-1][0]
        until = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
            seconds=REFRESH_AHEAD_S + PERIOD_S
        )
        return {
            "AccessKeyId": access,
            "SecretAccessKey": self.secrets[access],
            "Token": "",  # long-term keys of the gateway's: no session token goes with them
            "Expiration": until.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }

    def revoke_due(self) -> None:
        with self.lock:
            for access, when in self.handed[:-1]:
                if access not in self.revoked and time.monotonic() - when >= REVOKE_AFTER_S:
                    _admin(self.gateway, self.root, "delete-user", query=f"access={access}")
                    self.revoked.append(access)

    def handed_since(self, since: float) -> list[str]:
        return [access for access, when in self.handed if when >= since]


@contextlib.contextmanager
def credentials_endpoint(accounts: RotatingAccounts) -> Iterator[str]:
    """The endpoint serving `accounts`, with a thread revoking those due."""

    def answer(_path: str, headers: Mapping[str, str]) -> tuple[int, bytes]:
        if headers.get("Authorization") != accounts.token_file.read_text():
            return 401, b"{}"
        return 200, json.dumps(accounts.current()).encode()

    stop = threading.Event()

    def revoking() -> None:
        while not stop.wait(PERIOD_S / 4):
            accounts.revoke_due()

    revoker = threading.Thread(target=revoking)
    with json_server(answer) as url:
        revoker.start()
        try:
            yield f"{url}/v1/credentials"
        finally:
            stop.set()
            revoker.join(timeout=10)


@pytest.fixture
def rotating(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Settings, RotatingAccounts]]:
    """A versitygw of its own holding accounts, the endpoint rotating them, and an
    environment with no static key: the test's settings point at that gateway."""
    port = free_port()
    gateway = f"http://127.0.0.1:{port}"
    access, secret = _suite_keys()
    (tmp_path / "iam").mkdir()
    (tmp_path / "data").mkdir()
    argv = [str(TOOLS / "versitygw"), "--port", f"127.0.0.1:{port}", "--region", "us-east-1"]
    argv += ["--quiet", "--keep-alive", "--iam-dir", str(tmp_path / "iam")]
    argv += ["--iam-cache-disable", "posix", str(tmp_path / "data")]  # revoked at once
    env = {**os.environ, "ROOT_ACCESS_KEY_ID": access, "ROOT_SECRET_ACCESS_KEY": secret}
    with serving(argv, port, tmp_path / "versitygw.log", env):
        root = boto3.client(
            "s3",
            endpoint_url=gateway,
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            region_name="us-east-1",
        )
        root.create_bucket(Bucket="pdfqueue")
        token = tmp_path / "eks-pod-identity-token"
        token.write_text(secrets.token_urlsafe(32))
        accounts = RotatingAccounts(gateway, (access, secret), token)
        with credentials_endpoint(accounts) as url:
            monkeypatch.delenv("AWS_ACCESS_KEY_ID")
            monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
            monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", url)
            monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token))
            # a new botocore session reads the provider chain again (the default one cached it)
            monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
            yield _on(settings, s3_endpoint_url=gateway, upload_part_bytes=5 * 1024**2), accounts


async def _slowly(data: bytes, chunk: int, pause_s: float) -> AsyncIterator[bytes]:
    """The body as a slow client sends it."""
    for start in range(0, len(data), chunk):
        yield data[start : start + chunk]
        await asyncio.sleep(pause_s)


async def test_a_long_batch_writes_through_rotating_credentials_on_both_paths(
    rotating: tuple[Settings, RotatingAccounts], db: Any, tmp_path: Path
) -> None:
    on, accounts = rotating
    corpus = build_corpus(600, seed=33)
    await seed_users(db, corpus.users, table=on.users_table)
    zip_path = write_zip(corpus, tmp_path / "long.zip", seed=33)
    with zipfile.ZipFile(zip_path, "a") as zf:  # 16 MiB that does not compress: 4 parts
        zf.writestr("padding.bin", os.urandom(16 * 1024**2), zipfile.ZIP_STORED)
    async with api_on(on) as api:
        began = time.monotonic()
        answer = await api.post(
            "/v1/batches",
            content=_slowly(zip_path.read_bytes(), 1024**2, 0.1),
            headers={"Content-Type": "application/zip"},
        )
        assert answer.status_code == 202, answer.text
        uploaded = time.monotonic()
        during_upload = accounts.handed_since(began)
        await _run_worker(on)
        during_batch = accounts.handed_since(uploaded)
        batch_id = answer.json()["batch_id"]
        status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert status["status"] == "COMPLETED", status
    assert {k: status[k] for k in corpus.counts()} == {**corpus.counts()}
    assert status["ignored"] >= 1  # the padding
    # the parts went up under several accounts, the PDFs too, and old ones were revoked
    assert len(during_upload) >= 3, accounts.handed
    assert len(during_batch) >= 3, accounts.handed
    assert len(accounts.revoked) >= 3
    old = boto3.client(
        "s3",
        endpoint_url=on.s3_endpoint_url,
        aws_access_key_id=accounts.revoked[0],
        aws_secret_access_key=accounts.secrets[accounts.revoked[0]],
        region_name="us-east-1",
    )
    with pytest.raises(ClientError, match="InvalidAccessKeyId"):  # revoked means refused
        old.put_object(Bucket="pdfqueue", Key="after-revocation", Body=b"x")


# --- a web identity token file, exchanged at a real STS -----------------------------------


@dataclass(frozen=True)
class OidcIssuer:
    """An OpenID Connect issuer on https port 443 of an address of its own (the gateway's STS
    refuses to fetch keys from a port, a loopback or a private address, as AWS does)."""

    url: str
    thumbprint: str
    """SHA-1 of the top certificate the issuer presents, as IAM pins a provider's CA."""
    key: Any

    def token(self, subject: str, audience: str = "sts.amazonaws.com") -> str:
        now = int(time.time())
        claims = {"iss": self.url, "aud": audience, "sub": subject, "iat": now, "exp": now + 600}
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "k1"})


@contextlib.contextmanager
def oidc_issuer(folder: Path) -> Iterator[OidcIssuer]:
    address = f"203.0.113.{secrets.randbelow(250) + 2}"  # TEST-NET-3: routed nowhere
    subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], check=True)
    ca = trustme.CA()
    chain = folder / "issuer.pem"  # the leaf, then the CA: the CA is the top one, pinned
    chain.write_bytes(
        ca.issue_cert(address).private_key_and_cert_chain_pem.bytes() + ca.cert_pem.bytes()
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = {**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": "k1", "alg": "RS256"}
    url = f"https://{address}"
    documents = {
        "/.well-known/openid-configuration": {
            "issuer": url,
            "jwks_uri": f"{url}/jwks",
            "id_token_signing_alg_values_supported": ["RS256"],
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
        },
        "/jwks": {"keys": [jwk]},
    }

    def answer(path: str, _headers: Mapping[str, str]) -> tuple[int, bytes]:
        return (200, json.dumps(documents[path]).encode()) if path in documents else (404, b"{}")

    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(chain)
    try:
        with json_server(answer, address, 443, tls):
            top = ssl.PEM_cert_to_DER_cert(ca.cert_pem.bytes().decode())
            yield OidcIssuer(url, hashlib.sha1(top).hexdigest(), key)
    finally:
        subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], check=False)


@pytest.fixture
def web_identity(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Settings]:
    """versitygw's IAM service (its STS) and a gateway that asks it, an issuer it trusts for a
    role allowed S3, and the environment IRSA gives a pod: a token file and the role's ARN."""
    if os.geteuid() != 0:
        pytest.fail("the issuer needs an address of its own on lo and port 443: run as root")
    access, secret = _suite_keys()
    iam_port, gw_port = free_port(), free_port()
    socket_path = tmp_path / "iam.sock"
    versitygw = [str(TOOLS / "versitygw"), "--region", "us-east-1", "-a", access, "-s", secret]
    iam = [*versitygw, "-p", f"127.0.0.1:{iam_port}", "--quiet", "iam", "--dir", str(tmp_path)]
    iam += ["--private-ports", str(socket_path)]
    gateway = [*versitygw, "-p", f"127.0.0.1:{gw_port}", "--quiet", "--keep-alive"]
    gateway += ["--iam-standalone-endpoint", str(socket_path), "posix", str(tmp_path / "data")]
    (tmp_path / "data").mkdir()
    with (
        oidc_issuer(tmp_path) as issuer,
        serving(iam, iam_port, tmp_path / "iam.log"),
        serving(gateway, gw_port, tmp_path / "gateway.log"),
    ):
        sts = f"http://127.0.0.1:{iam_port}"
        admin = boto3.client(
            "iam",
            endpoint_url=sts,
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            region_name="us-east-1",
        )
        provider = admin.create_open_id_connect_provider(
            Url=issuer.url, ClientIDList=["sts.amazonaws.com"], ThumbprintList=[issuer.thumbprint]
        )["OpenIDConnectProviderArn"]
        host = issuer.url.removeprefix("https://")
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Federated": provider},
                    "Action": "sts:AssumeRoleWithWebIdentity",
                    "Condition": {
                        "StringEquals": {
                            f"{host}:aud": "sts.amazonaws.com",
                            f"{host}:sub": "system:serviceaccount:pdfqueue:pq-pdfqueue-worker",
                        }
                    },
                }
            ],
        }
        role = admin.create_role(RoleName="pdfqueue", AssumeRolePolicyDocument=json.dumps(trust))
        s3_only = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
        admin.put_role_policy(
            RoleName="pdfqueue",
            PolicyName="s3",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [s3_only]}),
        )
        boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{gw_port}",
            aws_access_key_id=access,
            aws_secret_access_key=secret,
            region_name="us-east-1",
        ).create_bucket(Bucket="pdfqueue")
        token = tmp_path / "token"
        token.write_text(issuer.token("system:serviceaccount:pdfqueue:pq-pdfqueue-worker"))
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
        monkeypatch.setenv("AWS_ROLE_ARN", role["Role"]["Arn"])
        monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "pdfqueue-worker")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts)
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
        yield _on(settings, s3_endpoint_url=f"http://127.0.0.1:{gw_port}")


async def test_a_batch_writes_with_a_web_identity_token_exchanged_at_sts(
    web_identity: Settings, db: Any, tmp_path: Path
) -> None:
    """IRSA's way: the token file and role ARN become temporary credentials (an ASIA key and
    a session token) at STS; the upload and every PDF are signed with them on both paths."""
    corpus = build_corpus(40, seed=34)
    await seed_users(db, corpus.users, table=web_identity.users_table)
    async with api_on(web_identity) as api:
        batch_id = await upload(api, write_zip(corpus, tmp_path / "b.zip", seed=34))
        await _run_worker(web_identity)
        status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert status["status"] == "COMPLETED", status
    assert {k: status[k] for k in corpus.counts()} == corpus.counts()
    client = boto3.session.Session().client(
        "s3", endpoint_url=web_identity.s3_endpoint_url, region_name="us-east-1"
    )
    credentials = client._get_credentials()
    assert credentials.method == "assume-role-with-web-identity"
    frozen = credentials.get_frozen_credentials()
    assert frozen.access_key.startswith("ASIA")
    assert frozen.token
    prefix = web_identity.storage_url.removeprefix("s3://pdfqueue/") + "/"
    stored = client.list_objects_v2(Bucket="pdfqueue", Prefix=prefix).get("Contents", [])
    keys = [o["Key"].removeprefix(prefix) for o in stored]
    assert f"uploads/{batch_id}.zip" in keys
    assert sum(1 for k in keys if k.startswith("pdfs/")) == corpus.counts()["linked"] > 0
