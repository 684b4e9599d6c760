"""The chart as a trial: the bundled PostgreSQL's users table, and what NOTES.txt tells a reader.

The table's SQL is the one `helm template` renders, run on the tests' PostgreSQL; the notes
are what `helm install --dry-run=client` prints (no cluster). The README's tour itself runs on
the real node (tests/test_e2e_pods.py).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import asyncpg
import httpx
import pytest

from pdfqueue.domain.settings import Settings
from pdfqueue.stores.postgres.pool import UsersTable, connect
from pdfqueue.stores.postgres.users import UserStore
from pdfqueue_dev.corpora.samples import Mix, build_corpus, write_zip
from tests.support.chartfix import CHART, HELM, Rendered, helm, template, values_file
from tests.support.helpers import RunWorker, linked_user_ids, upload
from tests.support.tours import commands, tour

pytestmark = pytest.mark.skipif(not HELM.exists(), reason="helm not built (make tools)")

INITDB = "/docker-entrypoint-initdb.d"
TABLE_SQL = "00-pdfqueue-users-table.sql"


def _render(*args: str) -> Rendered:
    return Rendered.parse(template("-f", str(values_file("default")), *args))


def _notes(*args: str, variant: str = "default") -> str:
    """What `helm install` prints after installing (NOTES.txt) for release pdfqueue in
    namespace pdfqueue, rendered by `helm template` (which leaves NOTES.txt out, and
    `helm install --dry-run` needs a cluster): a copy of the chart whose NOTES.txt is a define
    that a probe ConfigMap includes."""
    with tempfile.TemporaryDirectory() as tmp:
        chart = Path(tmp) / "pdfqueue"
        shutil.copytree(CHART, chart)
        notes = chart / "templates" / "NOTES.txt"
        (chart / "templates" / "_notesprobe.tpl").write_text(
            '{{- define "probe.notes" -}}\n' + notes.read_text() + "\n{{- end }}\n"
        )
        notes.unlink()
        (chart / "templates" / "probe.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe}\n"
            'data:\n  notes: {{ include "probe.notes" . | quote }}\n'
        )
        out = helm(
            "template",
            "pdfqueue",
            str(chart),
            "-n",
            "pdfqueue",
            "-f",
            str(values_file(variant)),
            *args,
        ).stdout
    (probe,) = [d for _, d in Rendered.parse(out).objects if d["metadata"]["name"] == "probe"]
    return str(probe["data"]["notes"])


def _users_sql(*args: str) -> str:
    cm = _render(*args).one("ConfigMap", "-postgresql-initdb")
    return str(cm["data"][TABLE_SQL])


def test_the_bundled_postgresql_runs_the_initdb_configmap_at_first_start() -> None:
    rendered = _render()
    cm = rendered.one("ConfigMap", "-postgresql-initdb")
    assert list(cm["data"]) == [TABLE_SQL]
    pod = rendered.one("StatefulSet", "-postgresql")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == INITDB]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]


def test_initdb_scripts_run_after_the_users_table_in_their_own_name_order() -> None:
    rendered = _render(
        "--set-string",
        r"postgresql.initdb.scripts.b\.sql=SELECT 2;",
        "--set-string",
        r"postgresql.initdb.scripts.00\.sql=SELECT 1;",
    )
    data = rendered.one("ConfigMap", "-postgresql-initdb")["data"]
    assert sorted(data) == [TABLE_SQL, "50-00.sql", "50-b.sql"]
    assert data["50-00.sql"] == "SELECT 1;"
    bad = helm(
        "template",
        "pq",
        str(CHART),
        "--set-string",
        "postgresql.initdb.scripts.run\\.sh=true",
        check=False,
    )
    assert bad.returncode != 0
    assert "invalid propertyName 'run.sh'" in bad.stderr


def test_nothing_of_the_trial_exists_with_an_external_database() -> None:
    rendered = Rendered.parse(template("-f", str(values_file("external"))))
    names = [d["metadata"]["name"] for d in rendered.all("ConfigMap")]
    assert not [n for n in names if n.endswith("-initdb")], names
    assert not rendered.all("StatefulSet") or all(
        "postgresql" not in d["metadata"]["name"] for d in rendered.all("StatefulSet")
    )
    notes = _notes(variant="external")
    assert "your application's table public.users (id, email, pdf_url)" in notes
    assert "psql" not in notes
    off = _render("--set", "postgresql.initdb.usersTable=false")
    assert not [d for d in off.all("ConfigMap") if d["metadata"]["name"].endswith("-initdb")]
    pod = off.one("StatefulSet", "-postgresql")["spec"]["template"]["spec"]
    assert all(m["mountPath"] != INITDB for m in pod["containers"][0]["volumeMounts"])
    assert "PDFs fail with\ndatabase_schema_error" in _notes(
        "--set", "postgresql.initdb.usersTable=false"
    )


def test_notes_say_how_to_reach_the_api_read_each_token_and_add_users() -> None:
    hashed = "sha256:" + "a" * 64
    notes = _notes(
        "--set",
        "auth.apiTokens.acme=" + "t" * 40,
        "--set",
        f"auth.apiTokens.globex={hashed}",
        "--set",
        "api.createPdfBatches=true",
    )
    assert "kubectl -n pdfqueue port-forward svc/pdfqueue-api 8000:80 >/dev/null &" in notes
    assert "export PDFQUEUE_URL=http://127.0.0.1:8000" in notes
    read = (
        "kubectl -n pdfqueue get secret pdfqueue-api-tokens -o jsonpath='{.data.api-tokens}'"
        " | base64 -d | tr , '\\n'"
    )
    assert f"export PDFQUEUE_TOKEN=\"$({read} | sed -n 's/^acme://p')\"" in notes
    assert "tenant globex: the Secret pdfqueue-api-tokens holds only its hash" in notes
    assert "uv run pdfqueue upload resumes.zip --wait" in notes
    assert "kubectl -n pdfqueue get pdfbatches" in notes
    assert "s3://pdfqueue/incoming/<tenant>/" in notes
    psql = "kubectl -n pdfqueue exec -i pdfqueue-postgresql-0 -- psql -U pdfqueue -d pdfqueue"
    assert f"{psql} -c '\\copy users (email) from pstdin' < emails.txt" in notes
    assert f"{psql} -c 'SELECT id, email, pdf_url FROM users'" in notes


async def test_the_trial_table_takes_addresses_alone_and_the_pipeline_links_to_it(
    api: httpx.AsyncClient,
    run_worker: RunWorker,
    db: asyncpg.Connection,
    settings: Settings,
    tmp_path: Path,
) -> None:
    """The chart's table for this test's users table, filled as NOTES.txt says (addresses
    only, as psql's \\copy does): a batch links to it."""
    await db.execute(_users_sql("--set", f"config.usersTable={settings.users_table}"))
    mix = Mix(known=0.8, no_email=0, unknown_email=0.2, already_linked=0, corrupt=0, encrypted=0)
    corpus = build_corpus(20, seed=41, mix=mix, extra_users=5)
    emails = [(u.email,) for u in corpus.users]
    await db.copy_records_to_table(settings.users_table, records=emails, columns=["email"])
    with pytest.raises(asyncpg.UniqueViolationError):  # one person, one row, whatever the case
        await db.execute(
            f'INSERT INTO "{settings.users_table}" (email) VALUES ($1)', emails[0][0].upper()
        )
    path = write_zip(corpus, tmp_path / "resumes.zip", seed=41)
    batch_id = await upload(api, path)
    await run_worker()
    status = (await api.get(f"/v1/batches/{batch_id}")).json()
    expected = corpus.counts()
    assert status["status"] == "COMPLETED", status
    assert status["linked"] == expected["linked"] > 0, status
    assert status["skipped_no_match"] == expected["skipped_no_match"] > 0, status
    assert len(await linked_user_ids(db, settings)) == expected["linked"]


async def test_the_trial_table_of_a_schema_with_a_tenant_column_is_one_pdfqueue_reads(
    settings: Settings, db: asyncpg.Connection
) -> None:
    schema = f"trial_{settings.users_table.removeprefix('users_')}"
    table = f"{schema}.People"  # mixed case: quoted as pdfqueue quotes it
    sql = _users_sql(
        "--set", f"config.usersTable={table}", "--set", "worker.usersTenantColumn=tenant"
    )
    try:
        await db.execute(sql)
        await db.execute(sql)  # IF NOT EXISTS: a script run again changes nothing
        await db.execute(
            f'INSERT INTO "{schema}"."People" (email, tenant) VALUES'
            " ('a@example.com', 'acme'), ('a@example.com', 'globex')"
        )
        pool = await connect(settings.database_url, max_size=1)
        try:
            assert await UserStore(pool, UsersTable(table, "tenant")).check_table() == []
        finally:
            await pool.close()
    finally:
        await db.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("id_type", ["integer", "uuid", "text"])
async def test_the_trial_table_follows_the_users_columns_and_id_type(
    id_type: str, settings: Settings, db: asyncpg.Connection
) -> None:
    """A trial of a table like the team's own: its names, its id type, made by the chart,
    read by the worker's check without a complaint (no misfit, the match indexed)."""
    names = {
        "usersIdColumn": "account",
        "usersEmailColumn": "mail",
        "usersLinkColumn": "resume_link",
        "usersIdType": id_type,
    }
    sets = [a for k, v in names.items() for a in ("--set", f"config.{k}={v}")]
    await db.execute(_users_sql("--set", f"config.usersTable={settings.users_table}", *sets))
    account = await db.fetchval(
        f'INSERT INTO "{settings.users_table}" (mail) VALUES ($1) RETURNING account', "a@x.io"
    )
    assert account is not None  # generated: a row needs only its address
    theirs = settings.model_copy(
        update={
            "users_id_column": "account",
            "users_email_column": "mail",
            "users_link_column": "resume_link",
            "users_id_type": id_type,
        }
    )
    pool = await connect(settings.database_url, max_size=1)
    try:
        assert await UserStore(pool, UsersTable.of(theirs)).check_table() == []
    finally:
        await pool.close()


def test_the_readme_tour_s_kubectl_lines_are_the_ones_notes_print() -> None:
    """README's port-forward and psql lines name what the chart makes, as NOTES.txt prints
    them for the tour's install (the tour's own values)."""
    readme = commands(tour("kubernetes"))
    install = next(c for c in readme if c.startswith("helm install "))
    sets = [a for a in install.split() if "=" in a and not a.startswith("auth.")]
    args = [arg for value in sets for arg in ("--set", value)]
    notes = [" ".join(line.split()) for line in _notes(*args).splitlines()]
    lines = [c for c in readme if c.startswith("kubectl ") and " get " not in c]
    assert len(lines) == 2, readme
    assert [c for c in lines if c not in notes] == []
