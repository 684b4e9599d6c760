"""Before a process takes work: are its stores reachable as configured?

A store that does not answer yet is the process's own wait to handle (PostgreSQL starting
beside it, Redis restarting), and so are the credentials and schema checks each process
makes as it waits (a bucket or database being created). A store whose TLS certificate does
not verify (a wrong or missing CA, an expired certificate, a host name it is not for) never
gets better by waiting, so the process stops at once and says which store and why, instead
of retrying for minutes with the cause in a log line among many. The same holds for a
users table whose columns are not of the types the users settings name (`users=True`, the
worker's check): a setting to change, not a wait; and for an S3 store that does not encrypt
what pdfqueue writes as PDFQUEUE_S3_SSE asks, or refuses its KMS key (a probe object is
written, checked and deleted per key in use).
"""

from __future__ import annotations

import asyncio
import logging
import sys

from pdfqueue.domain.errors import (
    CertificateRejected,
    EncryptionRefused,
    PdfQueueError,
    UsersTableMisfit,
)
from pdfqueue.domain.settings import Settings
from pdfqueue.stores.postgres.pool import UsersTable, connect
from pdfqueue.stores.postgres.users import UserStore
from pdfqueue.stores.redis.client import open_redis, ping
from pdfqueue.stores.storage import Storage

log = logging.getLogger(__name__)
PREFLIGHT_TIMEOUT_S = 2.0
"""Each store's look at most: a store that takes longer is one the process waits for."""


async def refuse_untrusted(
    settings: Settings, *, storage: bool = True, writes: bool = True
) -> None:
    """Raise CertificateRejected for the first of Redis, PostgreSQL and (with `storage`) S3
    whose TLS does not verify, EncryptionRefused for an S3 that does not encrypt as asked;
    anything else (a store down, a refusal the process's own wait reports) is logged and
    left to the process. `writes`: the process writes to S3 (the encryption probe is made)."""
    checks = [("redis", _redis(settings)), ("postgresql", _postgres(settings))]
    if storage:
        checks.append(("storage", _storage(settings, writes=writes)))
    for name, check in checks:
        try:
            await asyncio.wait_for(check, PREFLIGHT_TIMEOUT_S)
        except (CertificateRejected, EncryptionRefused):
            for _, rest in checks:
                rest.close()  # the checks not awaited yet
            raise
        except (PdfQueueError, TimeoutError) as exc:
            log.info("%s is not ready yet (%s): the process waits for it", name, exc)


async def _redis(settings: Settings) -> None:
    redis = open_redis(
        settings, connect_timeout_s=PREFLIGHT_TIMEOUT_S, timeout_s=PREFLIGHT_TIMEOUT_S
    )
    try:
        await ping(redis)
    finally:
        await redis.aclose()


async def _postgres(settings: Settings) -> None:
    pool = await connect(settings.database_url, min_size=1, max_size=1)
    await pool.close()


async def refuse_misfit_users(settings: Settings) -> None:
    """Raise UsersTableMisfit if the users table is there and its columns do not fit the
    users settings; a table not there yet, or PostgreSQL down, is the worker's to wait for."""
    try:
        pool = await asyncio.wait_for(
            connect(settings.database_url, min_size=1, max_size=1), PREFLIGHT_TIMEOUT_S
        )
    except (PdfQueueError, TimeoutError):
        return  # refuse_untrusted has said why
    try:
        await UserStore(pool, UsersTable.of(settings, scoped=True)).check_table()
    except UsersTableMisfit:
        raise
    except (PdfQueueError, TimeoutError) as exc:
        log.info("the users table is not ready yet (%s): the worker says so again", exc)
    finally:
        await pool.close()


async def _storage(settings: Settings, *, writes: bool) -> None:
    storage = Storage.from_settings(settings, threads=1)
    try:
        await storage.check()
        if writes:
            await storage.probe_encryption()
    finally:
        await storage.aclose()


def start_refused(
    settings: Settings, command: str, *, users: bool = False, writes: bool = True
) -> bool:
    """For a process's command line: run `refuse_untrusted` (and, with `users`,
    `refuse_misfit_users`) before anything starts; if refused, say `pdfqueue <command>:
    refusing to start: <why>` on stderr and answer True (the command exits 2, as for
    settings it cannot run with). `writes`: it writes to S3 (the API and the worker)."""

    async def checks() -> None:
        await refuse_untrusted(settings, writes=writes)
        if users:
            await refuse_misfit_users(settings)

    try:
        asyncio.run(checks())
    except (CertificateRejected, EncryptionRefused, UsersTableMisfit) as exc:
        print(f"pdfqueue {command}: refusing to start: {exc}", file=sys.stderr)
        return True
    return False
