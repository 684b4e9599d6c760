"""The `pdfqueue` client commands against a real API and worker: output, exit codes, mistakes."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import zipfile
from pathlib import Path

import httpx
import pytest

from pdfqueue.cli.main import (
    EXIT_BATCH_ENDED,
    EXIT_ERROR,
    EXIT_FILES_FAILED,
    EXIT_OK,
    build_parser,
    main,
)
from pdfqueue_dev.processes import free_port
from tests.support.helpers import ACME, ACME_TOKEN, GLOBEX_TOKEN, MakeCorpus, RunWorker


async def run(
    capsys: pytest.CaptureFixture[str], *argv: str, url: str, token: str = ACME_TOKEN
) -> tuple[int, str, str]:
    """Run the CLI in a thread (the API serves from this event loop): (code, stdout, stderr),
    stderr with its lines joined (the console wraps them at its width)."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, [*argv, "--url", url, "--token", token])
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())


@pytest.mark.timeout(240)
async def test_upload_wait_lists_and_reports_with_exit_codes(
    served: str,
    capsys: pytest.CaptureFixture[str],
    make_corpus: MakeCorpus,
    run_worker: RunWorker,
) -> None:
    corpus, path = await make_corpus(60, seed=12)
    expected = corpus.counts()
    assert expected["failed"] > 0

    async def newest(http: httpx.AsyncClient) -> str | None:
        batches = (await http.get("/v1/batches", params={"limit": 1})).json()["batches"]
        return batches[0]["batch_id"] if batches else None

    async def work_when_queued() -> None:
        async with httpx.AsyncClient(base_url=served, headers=ACME) as http:
            before = await newest(http)
            while await newest(http) == before:  # noqa: ASYNC110 (the CLI uploads in a thread)
                await asyncio.sleep(0.05)
        await run_worker()

    worker = asyncio.create_task(work_when_queued())
    code, out, _ = await run(capsys, "upload", str(path), "--wait", "--json", url=served)
    await worker
    summary = json.loads(out)
    assert code == EXIT_FILES_FAILED  # completed, but some files failed
    assert summary["status"] == "COMPLETED"
    assert {k: summary[k] for k in expected} == expected
    batch_id = summary["batch_id"]

    code, out, _ = await run(capsys, "batches", "--json", url=served)
    assert code == EXIT_OK
    listed = json.loads(out)[0]
    assert (listed["batch_id"], listed["file_name"]) == (batch_id, path.name)

    code, out, _ = await run(capsys, "files", batch_id, "--outcome", "failed", "--csv", url=served)
    assert code == EXIT_OK
    async with httpx.AsyncClient(base_url=served, headers=ACME) as http:
        api_csv = (await http.get(f"/v1/batches/{batch_id}/files?format=csv")).text
    api_rows = list(csv.reader(io.StringIO(api_csv)))
    cli_rows = list(csv.reader(io.StringIO(out)))
    assert cli_rows == [api_rows[0]] + [r for r in api_rows[1:] if r[2] == "failed"]
    assert len(cli_rows) == 1 + expected["failed"]

    code, out, _ = await run(capsys, "files", batch_id, "--outcome", "failed", url=served)
    assert code == EXIT_OK
    assert "password-protected" in out or "damaged" in out  # the reason, in words

    code, out, _ = await run(capsys, "watch", batch_id, url=served)  # already ended
    assert code == EXIT_FILES_FAILED
    assert "COMPLETED" in out
    code, _, _ = await run(capsys, "status", batch_id, url=served)
    assert code == EXIT_OK


async def test_a_zip_without_pdfs_fails_and_every_command_says_so_with_a_nonzero_exit(
    served: str, capsys: pytest.CaptureFixture[str], run_worker: RunWorker, tmp_path: Path
) -> None:
    path = tmp_path / "no-pdf.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("readme.txt", "hello")
        zf.writestr("a.docx", b"not a pdf")

    async def work_when_queued() -> None:
        async with httpx.AsyncClient(base_url=served, headers=ACME) as http:
            while not (await http.get("/v1/batches")).json()["batches"]:  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        await run_worker()

    worker = asyncio.create_task(work_when_queued())
    code, out, _ = await run(capsys, "upload", str(path), "--wait", url=served)
    await worker
    assert code == EXIT_BATCH_ENDED
    words = " ".join(out.split())
    assert "FAILED" in words
    assert "the ZIP holds 2 files and none is a PDF" in words
    assert "no_pdf_members" in words
    assert "readme.txt" not in words  # the names are the report's (`pdfqueue files`)

    async with httpx.AsyncClient(base_url=served, headers=ACME) as http:
        batch_id = (await http.get("/v1/batches")).json()["batches"][0]["batch_id"]
    code, out, _ = await run(capsys, "status", batch_id, "--json", url=served)
    assert code == EXIT_BATCH_ENDED
    assert json.loads(out)["reason"] == "no_pdf_members"
    code, _, _ = await run(capsys, "watch", batch_id, url=served)
    assert code == EXIT_BATCH_ENDED


async def test_usual_mistakes_get_clear_messages(
    served: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, make_corpus: MakeCorpus
) -> None:
    _, path = await make_corpus(2, seed=13)
    code, out, _ = await run(capsys, "upload", str(path), url=served)
    assert code == EXIT_OK
    batch_id = out.strip()

    code, _, err = await run(capsys, "status", batch_id, url=served, token=GLOBEX_TOKEN)
    assert code == EXIT_ERROR
    assert f"batch {batch_id} not found for this token (unknown, or another tenant's)" in err

    code, _, err = await run(capsys, "batches", url=served, token="x" * 40)
    assert code == EXIT_ERROR
    assert "the API refused the token: set PDFQUEUE_TOKEN (or --token)" in err

    not_zip = tmp_path / "cv.pdf"
    not_zip.write_bytes(b"%PDF-1.4\n")
    async with httpx.AsyncClient(base_url=served, headers=ACME) as http:
        before = (await http.get("/v1/batches", params={"limit": 1})).json()["batches"][0]
        code, _, err = await run(capsys, "upload", str(not_zip), url=served)
        assert code == EXIT_ERROR
        assert "is not a ZIP archive" in err
        assert "nothing was uploaded" in err
        code, _, err = await run(capsys, "upload", str(tmp_path / "missing.zip"), url=served)
        assert code == EXIT_ERROR
        assert "no such file" in err
        after = (await http.get("/v1/batches", params={"limit": 1})).json()["batches"][0]
        assert after["batch_id"] == before["batch_id"]  # nothing was created

    down = f"http://127.0.0.1:{free_port()}"
    code, _, err = await run(capsys, "batches", url=down)
    assert code == EXIT_ERROR
    assert f"cannot reach the pdfqueue API at {down}" in err

    code, _, err = await run(capsys, "status", batch_id, url=f"{served}/static")
    assert code == EXIT_ERROR
    assert "does not look like a pdfqueue API" in err


def test_every_client_command_has_an_example_and_exit_codes() -> None:
    parser = build_parser(only="status")
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in ("upload", "status", "watch", "batches", "files", "cancel"):
        text = commands[name].format_help()
        assert f"example:\n  pdfqueue {name}" in text, name
        assert "exit codes:" in text, name


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["purge", "--older-than", "5x"], "--older-than"),
        (["purge", "--older-than", "1.5h", "--dry-run"], "--older-than"),
        (["audit", "--since", "1w"], "--since"),
    ],
)
def test_a_duration_that_is_not_one_is_refused_with_the_option_named(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before any store is opened, as a usage error; it used to be a traceback."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"error: argument {option}: '{argv[2]}' is not a duration" in err
    assert "Traceback" not in err
