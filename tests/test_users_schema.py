"""The host's own users table: ids of UUID or text, its own column names, links as URLs.

End to end on real PostgreSQL, Redis and S3: a batch links a table keyed by UUID (scoped
by a tenant column) or by text ids that are no safe path, the report names each user by
the table's own id, the links are S3 URIs of objects that exist, and erasure of a person
and of the batch takes back exactly what pdfqueue wrote. And the worker's check of the live
table at start: the type that does not fit, the column that is missing, the index to create.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import asyncpg
import boto3
import httpx
import pytest
from redis.asyncio import Redis

from pdfqueue.domain.errors import DatabaseSchemaError, UsersTableMisfit
from pdfqueue.domain.settings import Settings
from pdfqueue.erasure import Eraser
from pdfqueue.runtime.connections import lifecycle_over
from pdfqueue.runtime.preflight import start_refused
from pdfqueue.stores.postgres.pool import UsersTable, connect
from pdfqueue.stores.postgres.retention import ERASED_NAME, RetentionStore
from pdfqueue.stores.postgres.users import UserStore
from pdfqueue.stores.storage import Storage
from pdfqueue_dev.corpora.samples import (
    CLEAN,
    Corpus,
    Expect,
    SampleUser,
    build_corpus,
    seed_users,
    write_zip,
)
from tests.support.helpers import RunWorker, upload

THEIR_COLUMNS = {
    "users_id_column": "account",
    "users_email_column": "mail",
    "users_link_column": "resume_link",
    "users_link_template": "s3://{bucket}/{prefix}{key}",
}
UUID_TABLE = dict(THEIR_COLUMNS, users_id_type="uuid", users_tenant_column="org")
TEXT_TABLE = dict(THEIR_COLUMNS, users_id_type="text")


RUN = uuid.uuid4().hex[:8]
"""Every test has a users table of its own, but all share pdfqueue_files, whose rows name
users by id (as in production, where there is one users table): ids of this run's own."""


def uuid_id(user: SampleUser) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{RUN}:user:{user.id}"))


def text_id(user: SampleUser) -> str:
    """Half the ids plain names, half what no path may hold: slashes, `..`, spaces."""
    return f"acct-{RUN}-{user.id}" if user.id % 2 else f"../acct/{RUN}/{user.id} ü"


async def their_table(
    db: asyncpg.Connection,
    settings: Settings,
    corpus: Corpus,
    ids: Callable[[SampleUser], str],
) -> None:
    """The host's table, as a team might have it: its own names, its ids, a tenant column."""
    id_type = "uuid" if settings.users_id_type == "uuid" else "text"
    table = f'"{settings.users_table}"'
    await db.execute(
        f"CREATE TABLE {table} (account {id_type} PRIMARY KEY, mail varchar(320) NOT NULL,"
        " resume_link text, org text NOT NULL DEFAULT 'acme')"
    )
    await db.execute(f"CREATE INDEX ON {table} (org, lower(mail))")
    await db.executemany(
        f"INSERT INTO {table} (account, mail, resume_link) VALUES ($1, $2, $3)",
        [(ids(u), u.email, u.pdf_url) for u in corpus.users],
    )


async def links_of(db: asyncpg.Connection, table: str) -> dict[str, str | None]:
    rows = await db.fetch(f"SELECT account, resume_link FROM {table}")
    return {str(r["account"]): r["resume_link"] for r in rows}


def s3_object(link: str) -> tuple[str, str]:
    """(bucket, key) of an `s3://bucket/key` link."""
    match = re.fullmatch(r"s3://([^/]+)/(.+)", link)
    assert match, link
    return match[1], match[2]


@pytest.fixture
async def eraser(settings: Settings) -> AsyncIterator[Eraser]:
    pool = await connect(settings.database_url, max_size=4)
    storage = Storage.from_settings(settings, threads=4)
    client = Redis.from_url(settings.redis_url)
    retention = RetentionStore.of(pool, settings)
    yield Eraser(retention, lifecycle_over(pool, client, settings), storage, settings)
    await client.aclose()
    await storage.aclose()
    await pool.close()


@pytest.mark.parametrize(
    "ids",
    [
        pytest.param(uuid_id, id="uuid-and-tenant", marks=pytest.mark.settings(**UUID_TABLE)),
        pytest.param(text_id, id="text-ids-no-path", marks=pytest.mark.settings(**TEXT_TABLE)),
    ],
)
async def test_a_batch_links_their_table_and_erasure_takes_back_only_what_it_wrote(
    ids: Callable[[SampleUser], str],
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    db: asyncpg.Connection,
    settings: Settings,
    storage: Storage,
    eraser: Eraser,
    s3_keys: Callable[[str], list[str]],
    tmp_path: Path,
) -> None:
    corpus = build_corpus(30, seed=21)
    await their_table(db, settings, corpus, ids)
    owners = {u.email: u for u in corpus.users}
    linked = [f for f in corpus.files if f.expect is Expect.LINKED]
    if settings.users_tenant_column:  # another tenant's user of the same address: never linked
        twin = owners[linked[0].email or ""]
        await db.execute(
            f'INSERT INTO "{settings.users_table}" (account, mail, org) VALUES ($1, $2, $3)',
            str(uuid.uuid4()),
            twin.email,
            "globex",
        )
    batch_id = await upload(api, write_zip(corpus, tmp_path / "theirs.zip", seed=21))
    await run_worker()

    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    assert status["status"] == "COMPLETED"
    assert {k: status[k] for k in corpus.counts()} == corpus.counts()
    report = {r["name"]: r for r in (await api.get(f"/v1/batches/{batch_id}/files")).json()}
    table = f'"{settings.users_table}"'
    links = {
        str(r["account"]): (r["org"], r["resume_link"])
        for r in await db.fetch(f"SELECT account, org, resume_link FROM {table}")
    }
    s3 = boto3.client("s3", endpoint_url=settings.s3_endpoint_url, region_name="us-east-1")
    prefix = settings.storage_url.removeprefix("s3://pdfqueue/")
    for f in linked:
        row = report[f.name]
        user_id = ids(owners[f.email or ""])
        assert row["user_id"] == user_id  # as the table holds it, text
        assert ".." not in row["object_key"]
        assert row["object_key"].startswith("pdfs/~" if "/" in user_id else f"pdfs/{user_id}/")
        org, link = links[user_id]
        bucket, key = s3_object(link)
        assert (org, bucket, key) == ("acme", "pdfqueue", f"{prefix}/{row['object_key']}")
        assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] > 0
    ours = {a for a, (_, link) in links.items() if link and link.startswith("s3://")}
    assert len(ours) == len(linked)  # the globex twin and no one else twice
    hosts = {a: link for a, (_, link) in links.items() if link and not link.startswith("s3://")}
    assert len(hosts) == sum(1 for u in corpus.users if u.pdf_url)

    # erase a person: their link, their object, their rows; nobody else's
    person = owners[linked[0].email or ""]
    removed = await eraser.erase_person(person.email)
    assert (removed.links, removed.objects) == (1, 1)
    assert links[ids(person)][1] is not None
    after = await links_of(db, table)
    assert after[ids(person)] is None
    assert report[linked[0].name]["object_key"] not in s3_keys("pdfs/")
    erased = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    assert sum(1 for r in erased if r["name"] == ERASED_NAME) == 1
    assert all(r["user_id"] != ids(person) for r in erased)

    # erase the batch: every link it wrote unset, every object gone, the host's links kept
    await eraser.erase_batch(batch_id, tenant="acme")
    after = await links_of(db, table)
    assert {a: link for a, link in after.items() if link} == hosts
    assert s3_keys("pdfs/") == []


async def test_a_legacy_integer_table_keeps_its_numbers_in_the_report(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    db: asyncpg.Connection,
    settings: Settings,
    tmp_path: Path,
) -> None:
    """The default: `id bigint, email, pdf_url`, ids as JSON numbers, links as keys."""
    corpus = build_corpus(4, seed=22, mix=CLEAN)
    await seed_users(db, corpus.users, table=settings.users_table)
    batch_id = await upload(api, write_zip(corpus, tmp_path / "ints.zip", seed=22))
    await run_worker()
    report = (await api.get(f"/v1/batches/{batch_id}/files")).json()
    linked = [r for r in report if r["outcome"] == "linked"]
    assert linked
    assert all(isinstance(r["user_id"], int) for r in linked)
    table = f'"{settings.users_table}"'
    rows = await db.fetch(f"SELECT id, pdf_url FROM {table} WHERE pdf_url IS NOT NULL")
    assert {r["id"]: r["pdf_url"] for r in rows} == {r["user_id"]: r["object_key"] for r in linked}


# --- the check at start -----------------------------------------------------------------


async def check(settings: Settings) -> list[str]:
    pool = await connect(settings.database_url, max_size=1)
    try:
        return await UserStore(pool, UsersTable.of(settings, scoped=True)).check_table()
    finally:
        await pool.close()


async def refused(settings: Settings) -> bool:
    """The worker command's check (it runs its own event loop: in a thread here)."""
    return await asyncio.to_thread(start_refused, settings, "worker", users=True)


@pytest.mark.settings(**THEIR_COLUMNS)
async def test_an_id_of_another_type_refuses_the_worker_with_the_setting_to_change(
    db: asyncpg.Connection, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    await db.execute(
        f'CREATE TABLE "{settings.users_table}" (account uuid PRIMARY KEY, mail text,'
        " resume_link text)"
    )
    with pytest.raises(UsersTableMisfit, match=r"account is of type uuid.*USERS_ID_TYPE=uuid"):
        await check(settings)
    assert await refused(settings)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("pdfqueue worker: refusing to start:")
    assert "set PDFQUEUE_USERS_ID_TYPE=uuid" in err[0]
    fitting = settings.model_copy(update={"users_id_type": "uuid"})
    assert not await refused(fitting)


@pytest.mark.settings(**THEIR_COLUMNS, users_id_type="text")
async def test_a_link_column_that_is_not_text_is_refused(
    db: asyncpg.Connection, settings: Settings
) -> None:
    await db.execute(
        f'CREATE TABLE "{settings.users_table}" (account text PRIMARY KEY, mail text,'
        " resume_link integer)"
    )
    link = r"resume_link \(PDFQUEUE_USERS_LINK_COLUMN\) is of type int4"
    with pytest.raises(UsersTableMisfit, match=link):
        await check(settings)


@pytest.mark.settings(**THEIR_COLUMNS, users_id_type="text", users_tenant_column="org")
async def test_missing_columns_are_named_with_their_settings(
    db: asyncpg.Connection, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(DatabaseSchemaError, match="does not exist"):
        await check(settings)
    await db.execute(f'CREATE TABLE "{settings.users_table}" (account text, email text)')
    with pytest.raises(DatabaseSchemaError) as missing:
        await check(settings)
    assert "mail (PDFQUEUE_USERS_EMAIL_COLUMN)" in str(missing.value)
    assert "resume_link (PDFQUEUE_USERS_LINK_COLUMN)" in str(missing.value)
    assert "org (PDFQUEUE_USERS_TENANT_COLUMN)" in str(missing.value)
    # a table not ready yet is the worker's to wait for, not a refusal
    assert not await refused(settings)


@pytest.mark.parametrize(
    "tenant",
    [pytest.param(None, id="one-tenant"), pytest.param("org", id="by-tenant")],
)
async def test_a_match_without_an_index_warns_with_the_statement_that_creates_it(
    tenant: str | None, db: asyncpg.Connection, settings: Settings
) -> None:
    update = {**THEIR_COLUMNS, "users_id_type": "text", "users_tenant_column": tenant}
    settings = settings.model_copy(update=update)
    await db.execute(
        f'CREATE TABLE "{settings.users_table}" (account text PRIMARY KEY, mail varchar(320),'
        " resume_link text, org text)"
    )
    await db.execute(f'CREATE INDEX ON "{settings.users_table}" (mail)')  # not the expression
    await db.execute(f"CREATE INDEX ON \"{settings.users_table}\" (lower(mail)) WHERE org = 'x'")
    (warning,) = await check(settings)
    statement = warning.partition("Create one: ")[2]
    assert statement.startswith("CREATE INDEX CONCURRENTLY")
    await db.execute(statement)  # the advice is a statement PostgreSQL runs
    assert await check(settings) == []


async def test_a_link_template_finds_only_its_own_links() -> None:
    from pdfqueue.domain.links import UserLinks

    links = UserLinks.of("s3://{bucket}/{prefix}{key}", "s3://docs/pdfqueue/")
    assert links.link("pdfs/7/ab.pdf") == "s3://docs/pdfqueue/pdfs/7/ab.pdf"
    assert links.key("s3://docs/pdfqueue/pdfs/7/ab.pdf") == "pdfs/7/ab.pdf"
    assert links.key("pdfs/7/ab.pdf") is None  # a link of another template, or the host's
    assert links.key("s3://docs/pdfqueue/") is None
    assert UserLinks.of("{key}", "s3://docs").key("pdfs/1/x.pdf") == "pdfs/1/x.pdf"


def test_ids_that_are_no_path_get_a_folder_of_their_hash() -> None:
    from pdfqueue.domain import keys

    assert keys.linked_pdf(42, "ab") == "pdfs/42/ab.pdf"
    plain = "0b6a2f1e-8c5d-4b7a-9e3f-2a1c4d5e6f70"
    assert keys.linked_pdf(plain, "ab") == f"pdfs/{plain}/ab.pdf"
    # `~` opens no plain id, so no id can name the folder of another's hash
    for hostile in ("../x", "a/b", ".hidden", "..", "", "ü", "a b", "x" * 129, "~" + "0" * 64):
        key = keys.linked_pdf(hostile, "ab")
        digest = hashlib.sha256(hostile.encode()).hexdigest()
        assert key == f"pdfs/~{digest}/ab.pdf", hostile
