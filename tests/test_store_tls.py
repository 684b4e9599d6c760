"""Stores over verified TLS, each a real server with certificates of a CA made here (trustme):
Redis (`rediss://`, `tls-port`, an ACL user), PostgreSQL (`ssl = on`, `sslmode=verify-full`)
and S3 (versitygw `--cert`, both ways pdfqueue reaches it: boto3 and the native per-PDF
requests). A certificate of another CA, an expired one, or one for another host name stops
a process at start with the store and the reason in one line, never a wait; `/readyz` of a
running API names a store whose certificate stopped verifying.

What each stands for: ElastiCache and Memorystore in-transit encryption (TLS on the Redis
port, an ACL user and password, the provider's CA bundle), RDS and Cloud SQL with
`sslmode=verify-full` against the provider's root bundle, and S3 endpoints behind a private
CA (MinIO, Ceph, an S3 gateway) as `AWS_CA_BUNDLE` names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import trustme
from arq import create_pool

from pdfqueue.domain.errors import CertificateRejected
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.preflight import refuse_untrusted
from pdfqueue.stores.postgres.pool import connect
from pdfqueue.stores.redis.client import arq_settings, open_redis, ping
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.processes import Child, free_port, wait_http, wait_until
from tests.support.helpers import settings_env
from tests.support.servers import serving

ROOT = Path(__file__).resolve().parents[1]
VERSITYGW = (
    Path(os.environ.get("PDFQUEUE_TOOLS_CACHE", "/var/cache/pdfqueue-tools")) / "bin/versitygw"
)
PASSWORD = "tls-test-password"

BAD = {
    "another CA": "unable to get local issuer certificate",
    "expired": "certificate has expired",
    "another host": "Hostname mismatch",
}
"""Each certificate that must not verify, and the reason OpenSSL gives for it."""


@dataclass(frozen=True)
class Pki:
    """The trusted CA's bundle, and each server certificate (chain and key) by name."""

    ca: Path
    certs: dict[str, tuple[Path, Path]]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    trusted, other = trustme.CA(), trustme.CA()
    now = datetime.datetime.now(datetime.UTC)
    issued = {
        "good": trusted.issue_cert("localhost", "127.0.0.1"),
        "another CA": other.issue_cert("localhost", "127.0.0.1"),
        "expired": trusted.issue_cert(
            "localhost",
            "127.0.0.1",
            not_before=now - datetime.timedelta(days=2),
            not_after=now - datetime.timedelta(days=1),
        ),
        "another host": trusted.issue_cert("db.internal.example"),
    }
    certs: dict[str, tuple[Path, Path]] = {}
    for n, (name, leaf) in enumerate(issued.items()):
        chain, key = root / f"{n}.pem", root / f"{n}.key"
        leaf.private_key_and_cert_chain_pem.write_to_path(str(chain))
        leaf.private_key_pem.write_to_path(str(key))
        certs[name] = (chain, key)
    trusted.cert_pem.write_to_path(str(root / "ca.pem"))
    root.chmod(0o755)  # PostgreSQL, not root, reads its copies
    return Pki(root / "ca.pem", certs)


@contextlib.contextmanager
def redis_tls(pki: Pki, cert: str, tmp_path: Path) -> Iterator[str]:
    """redis-server on a TLS port only, with `cert`; its URL as the ACL user `pdfqueue`."""
    chain, key = pki.certs[cert]
    port = free_port()
    argv = ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1"]
    argv += ["--tls-cert-file", str(chain), "--tls-key-file", str(key)]
    argv += ["--tls-ca-cert-file", str(pki.ca), "--tls-auth-clients", "no"]
    argv += ["--save", "", "--appendonly", "no", "--dir", str(tmp_path)]
    argv += ["--user", "default", "off", "--user", "pdfqueue", "on", f">{PASSWORD}"]
    argv += ["~*", "&*", "+@all"]
    with serving(argv, port, tmp_path / f"redis-{port}.log"):
        yield f"rediss://pdfqueue:{PASSWORD}@localhost:{port}/0"


@contextlib.contextmanager
def s3_tls(pki: Pki, cert: str, tmp_path: Path, port: int | None = None) -> Iterator[str]:
    """versitygw serving https with `cert`, the suite's keys; its endpoint URL."""
    chain, key = pki.certs[cert]
    port = port or free_port()
    data = tmp_path / "s3"
    data.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "ROOT_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "ROOT_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
    }
    argv = [str(VERSITYGW), "--port", f"127.0.0.1:{port}", "--region", "us-east-1"]
    argv += ["--cert", str(chain), "--key", str(key), "--quiet", "--keep-alive"]
    argv += ["posix", str(data)]
    with serving(argv, port, tmp_path / f"s3-{port}.log", env):
        yield f"https://localhost:{port}"


class TlsPostgres:
    """A PostgreSQL of its own (tools/services.sh), `ssl = on` with a certificate that can be
    swapped (a reload, as a rotation does)."""

    def __init__(self, pki: Pki, state: Path) -> None:
        self.pki, self.state, self.port = pki, state, free_port()
        self.env = {**os.environ, "PDFQUEUE_PG_PORT": str(self.port)}
        services = ["bash", str(ROOT / "tools/services.sh")]
        subprocess.run([*services, "start", str(state), "--only", "postgres"], env=self.env,
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        self.stop = [*services, "stop", str(state), "--only", "postgres"]
        self.data = (state / "pg").resolve()

    def serve(self, cert: str) -> None:
        chain, key = self.pki.certs[cert]
        for source, target in ((chain, "server.crt"), (key, "server.key")):
            shutil.copyfile(source, self.data / target)
            shutil.chown(self.data / target, "postgres", "postgres")
            (self.data / target).chmod(0o600)
        self.sql("ALTER SYSTEM SET ssl = on", "SELECT pg_reload_conf()")
        time.sleep(0.5)  # the postmaster rereads its files on SIGHUP, asynchronously

    def sql(self, *statements: str) -> None:
        argv = ["psql", "-X", "-q", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"]
        argv += ["-d", "postgres", "-v", "ON_ERROR_STOP=1"]
        for statement in statements:
            argv += ["-c", statement]
        subprocess.run(argv, check=True, capture_output=True, timeout=30)

    def url(self, ca: Path) -> str:
        return (
            f"postgresql://pdfqueue:pdfqueue@localhost:{self.port}/pdfqueue"
            f"?sslmode=verify-full&sslrootcert={ca}"
        )


@pytest.fixture(scope="module")
def postgres_tls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsPostgres]:
    server = TlsPostgres(pki, tmp_path_factory.mktemp("pg-tls"))
    try:
        yield server
    finally:
        subprocess.run(server.stop, env=server.env, capture_output=True, timeout=120, check=False)


async def _refused(settings: Settings) -> CertificateRejected:
    """What the start-up check raises, within a bound that shows it does not wait."""
    with pytest.raises(CertificateRejected) as refused:
        await asyncio.wait_for(refuse_untrusted(settings), 30)
    return refused.value


# ---- Redis -------------------------------------------------------------------------------


async def test_redis_over_verified_tls_with_an_acl_user(
    settings: Settings, pki: Pki, tmp_path: Path
) -> None:
    with redis_tls(pki, "good", tmp_path) as url:
        tls = settings.model_copy(update={"redis_url": url, "redis_ca_file": str(pki.ca)})
        await refuse_untrusted(tls)
        redis = open_redis(tls, connect_timeout_s=5, timeout_s=5)
        await ping(redis)
        assert await redis.acl_whoami() in ("pdfqueue", b"pdfqueue")
        await redis.aclose()
        pool = await create_pool(arq_settings(tls))  # the worker's and the delivery slots'
        assert await pool.ping()
        await pool.aclose()
        # the system's CAs do not know this one: verification is on without a CA file too
        untrusted = tls.model_copy(update={"redis_ca_file": None})
        refused = await _refused(untrusted)
        assert refused.service == "redis"


@pytest.mark.parametrize("cert", sorted(BAD))
async def test_redis_certificate_that_does_not_verify_is_named_at_start(
    settings: Settings, pki: Pki, tmp_path: Path, cert: str
) -> None:
    with redis_tls(pki, cert, tmp_path) as url:
        tls = settings.model_copy(update={"redis_url": url, "redis_ca_file": str(pki.ca)})
        refused = await _refused(tls)
    assert refused.service == "redis"
    assert BAD[cert] in str(refused)
    assert PASSWORD not in str(refused)


# ---- PostgreSQL --------------------------------------------------------------------------


async def test_postgres_over_verify_full(
    settings: Settings, pki: Pki, postgres_tls: TlsPostgres
) -> None:
    postgres_tls.serve("good")
    tls = settings.model_copy(update={"database_url": postgres_tls.url(pki.ca)})
    await refuse_untrusted(tls)
    pool = await connect(tls.database_url, min_size=1, max_size=1)
    assert await pool.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
    await pool.close()


@pytest.mark.parametrize("cert", sorted(BAD))
async def test_postgres_certificate_that_does_not_verify_is_named_at_start(
    settings: Settings, pki: Pki, postgres_tls: TlsPostgres, cert: str
) -> None:
    postgres_tls.serve(cert)
    tls = settings.model_copy(update={"database_url": postgres_tls.url(pki.ca)})
    refused = await _refused(tls)
    assert refused.service == "postgresql"
    assert BAD[cert] in str(refused)
    assert "pdfqueue:pdfqueue" not in str(refused)


# ---- S3 ----------------------------------------------------------------------------------


async def test_s3_over_verified_tls_on_both_paths(
    settings: Settings, pki: Pki, tmp_path: Path
) -> None:
    with s3_tls(pki, "good", tmp_path) as endpoint:
        tls = settings.model_copy(update={"s3_endpoint_url": endpoint, "s3_ca_file": str(pki.ca)})
        storage = Storage.from_settings(tls)
        try:
            assert await storage.ensure_bucket() in (True, False)  # boto3
            await storage.put("tls/a.pdf", b"%PDF-1.7 over TLS")  # native
            assert await storage.read_range("tls/a.pdf", 0, 8) == b"%PDF-1.7"  # native
            assert await storage.size("tls/a.pdf") == 17  # boto3
            await refuse_untrusted(tls)
        finally:
            await storage.aclose()


@pytest.mark.parametrize("cert", sorted(BAD))
async def test_s3_certificate_that_does_not_verify_is_named_on_both_paths(
    settings: Settings, pki: Pki, tmp_path: Path, cert: str
) -> None:
    with s3_tls(pki, cert, tmp_path) as endpoint:
        tls = settings.model_copy(update={"s3_endpoint_url": endpoint, "s3_ca_file": str(pki.ca)})
        refused = await _refused(tls)  # boto3's HEAD of the bucket
        storage = Storage.from_settings(tls)
        try:
            with pytest.raises(CertificateRejected) as native:
                await asyncio.wait_for(storage.read_range("tls/a.pdf", 0, 8), 30)
        finally:
            await storage.aclose()
    for error in (refused, native.value):
        assert error.service == "S3"
        assert BAD[cert] in str(error)


# ---- processes ---------------------------------------------------------------------------


def _start(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    pdfqueue = Path(sys.executable).with_name("pdfqueue")
    return subprocess.run(
        [str(pdfqueue), command, *(["--port", str(free_port())] if command == "api" else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_worker_stops_at_start_naming_redis_and_the_reason(
    settings: Settings, pki: Pki, tmp_path: Path
) -> None:
    with redis_tls(pki, "expired", tmp_path) as url:
        env = settings_env(settings, PDFQUEUE_REDIS_URL=url, PDFQUEUE_REDIS_CA_FILE=str(pki.ca))
        done = _start("worker", env)
    assert done.returncode != 0
    assert "redis: TLS certificate not accepted: certificate has expired" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_api_stops_at_start_naming_postgres_and_the_reason(
    settings: Settings, pki: Pki, postgres_tls: TlsPostgres
) -> None:
    postgres_tls.serve("another host")
    env = settings_env(settings, PDFQUEUE_DATABASE_URL=postgres_tls.url(pki.ca))
    done = _start("api", env)
    assert done.returncode == 2
    assert "postgresql: TLS certificate not accepted: Hostname mismatch" in done.stderr
    assert "Traceback" not in done.stderr


async def _with_bucket(settings: Settings) -> None:
    storage = Storage.from_settings(settings)
    try:
        await storage.ensure_bucket()
    finally:
        await storage.aclose()


def test_readyz_names_a_store_whose_certificate_stopped_verifying(
    settings: Settings, pki: Pki, tmp_path: Path
) -> None:
    """The API runs on S3 over TLS; S3 comes back with an expired certificate (a rotation
    that did not happen): /readyz says which store and why, the others stay ok."""
    port = free_port()
    env = settings_env(settings, PDFQUEUE_S3_CA_FILE=str(pki.ca))
    env["PDFQUEUE_S3_ENDPOINT_URL"] = f"https://localhost:{port}"
    with s3_tls(pki, "good", tmp_path, port):
        asyncio.run(
            _with_bucket(
                settings.model_copy(
                    update={
                        "s3_endpoint_url": env["PDFQUEUE_S3_ENDPOINT_URL"],
                        "s3_ca_file": str(pki.ca),
                    }
                )
            )
        )
        api_port = free_port()
        pdfqueue = Path(sys.executable).with_name("pdfqueue")
        api = Child("api", [str(pdfqueue), "api", "--port", str(api_port)], env, tmp_path)
        url = f"http://127.0.0.1:{api_port}/readyz"
        wait_http(url, [api])
    try:
        with s3_tls(pki, "expired", tmp_path, port):

            def named() -> dict[str, str] | None:
                answer = httpx.get(url, timeout=10)
                report: dict[str, str] = answer.json()
                return (
                    report if answer.status_code == 503 and "expired" in report["storage"] else None
                )

            report = wait_until(named, "/readyz naming the storage's certificate", timeout_s=60)
        assert (
            report["storage"] == "error: S3: TLS certificate not accepted: certificate has expired"
        )
        assert report["redis"] == report["postgresql"] == "ok"
    finally:
        api.proc.terminate()
        api.proc.wait(timeout=30)


def test_a_missing_ca_file_is_refused_by_name() -> None:
    missing = f"/nonexistent/{uuid.uuid4().hex}.pem"
    with pytest.raises(ValueError, match=f"PDFQUEUE_REDIS_CA_FILE: no such file: {missing}"):
        Settings(redis_ca_file=missing)
    with pytest.raises(ValueError, match="PDFQUEUE_REDIS_CERT_FILE and PDFQUEUE_REDIS_KEY_FILE"):
        Settings(redis_cert_file=__file__)
