"""`pdfqueue demo`: generate résumés, run the API and workers, upload, show the result."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shlex
import shutil
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
from rich.console import Console

from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.provision import provision
from pdfqueue_dev.corpora.samples import build_corpus, seed_users, write_zip
from pdfqueue_dev.processes import ChildExited, free_port, free_ports, wait_http
from pdfqueue_dev.supervisor import Supervisor

console = Console(stderr=True)
DEMO_TABLE = "demo_users"  # never the host's real users table: the demo truncates it
STATE = Path(".pdfqueue/demo")
ENV_FILE = STATE / "env"
"""Sourced by the README's tour: PATH with uv, PDFQUEUE_URL, PDFQUEUE_TOKEN, DEMO_BATCH."""
STOP_GRACE_S = 10.0
"""How long the API and workers have to stop after Ctrl-C before they are killed: a worker
would otherwise finish its running jobs first (PDFQUEUE_JOB_COMPLETION_WAIT_S, 30 s), and the
API its open event streams (the page's), for as long as they last. A worker's own stop
(its parsing processes, its pools) took up to 4 s on a loaded 2-core machine."""


def register(sub: Any) -> None:
    """The `demo` command, plugged into `pdfqueue` by the `pdfqueue.commands` entry point."""
    p: argparse.ArgumentParser = sub.add_parser(
        "demo", help="run the whole pipeline on generated résumés"
    )
    p.add_argument("--files", type=int, default=300, help="PDFs in the demo ZIP (default 300)")
    p.add_argument("--workers", type=int, default=2, help="worker processes to start (default 2)")
    p.add_argument(
        "--port", type=int, default=8000, help="the demo API's port (default 8000; 0: any free one)"
    )
    p.add_argument("--no-wait", action="store_true", help="exit when the batch is done")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return run_demo(args.files, args.workers, args.port, wait=not args.no_wait)


def run_demo(files: int, workers: int, port: int, *, wait: bool) -> int:
    """Run the whole pipeline once; with `wait`, keep serving until Ctrl-C."""
    STATE.mkdir(parents=True, exist_ok=True)
    ENV_FILE.unlink(missing_ok=True)  # never a token of an API that is not running
    supervisor = Supervisor(STATE, grace_s=STOP_GRACE_S)
    ended: list[int] = []  # the batch's exit code, once it has ended
    try:
        with supervisor:
            _serve(supervisor, files, workers, port, wait=wait, ended=ended)
    except KeyboardInterrupt:
        pass  # the Supervisor's word for a stop signal: Ctrl-C, SIGTERM, SIGHUP
    finally:
        ENV_FILE.unlink(missing_ok=True)
        if supervisor.children:
            console.print(
                "stopped the API and workers. Redis and PostgreSQL keep running for the next"
                " `make demo`: `make demo-stop` stops them",
                highlight=False,
                soft_wrap=True,
            )
    return ended[0] if ended else 130  # 130: interrupted before the batch ended


def _serve(
    children: Supervisor, files: int, workers: int, port: int, *, wait: bool, ended: list[int]
) -> None:
    from pdfqueue.cli.client import Client
    from pdfqueue.cli.main import follow, print_summary  # the CLI's own progress display

    env = {**os.environ, "PDFQUEUE_USERS_TABLE": DEMO_TABLE}
    settings = Settings(users_table=DEMO_TABLE)
    token = os.environ.get("PDFQUEUE_TOKEN")
    if not settings.api_tokens and not settings.allow_anonymous:
        token = secrets.token_urlsafe(32)  # the API refuses to run open unless asked to
        env["PDFQUEUE_API_TOKENS"] = f"demo:{token}"
    zip_path = STATE / f"resumes-{files}.zip"
    asyncio.run(_prepare(settings, files, zip_path, generate=not zip_path.exists()))

    port = _api_port(port)
    url = f"http://127.0.0.1:{port}"
    # each process a port of its own: a second worker on the first one's port serves no metrics
    metrics_ports = free_ports(workers)
    children.start("api", _command("api", "--port", str(port)), env)
    for i, metrics_port in enumerate(metrics_ports):
        worker_env = {**env, "PDFQUEUE_METRICS_PORT": str(metrics_port)}
        children.start(f"worker-{i + 1}", _command("worker"), worker_env)
    try:
        wait_http(f"{url}/readyz", children.children)
    except (ChildExited, TimeoutError) as exc:
        raise SystemExit(f"the API and workers did not start: {exc}\nlogs: {STATE}/*.log") from exc
    with Client(url, token or "anonymous") as client:  # an open API takes any token
        console.print(f"uploading {zip_path} ({zip_path.stat().st_size // 1024} KiB)")
        batch_id = client.upload(zip_path)["batch_id"]
        started = time.monotonic()
        status = follow(client, batch_id)
    elapsed = time.monotonic() - started
    print_summary(status, as_json=False)
    rate = status["processed"] / elapsed
    console.print(f"{status['processed']} PDFs in {elapsed:.1f}s ({rate:.0f}/s)")
    metrics = [f"{url}/metrics (api)"]
    metrics += [
        f"http://127.0.0.1:{p}/metrics (worker-{i + 1})" for i, p in enumerate(metrics_ports)
    ]
    print_links(console, url, batch_id, token, metrics)
    write_env_file(url, token, batch_id)
    ended.append(0 if status["status"] == "COMPLETED" else 1)
    if wait:
        console.print(
            f"in another shell, from this folder: [bold]. {ENV_FILE}[/bold] (uv on PATH, the URL,"
            " the token and DEMO_BATCH), then the tour in README.md",
            highlight=False,
        )
        console.print("[bold]the API and workers keep running; Ctrl-C stops them[/bold]")
        while True:
            signal.pause()


def print_links(
    out: Console, url: str, batch_id: str, token: str | None, metrics: list[str]
) -> None:
    """Where to look next, one line each, never wrapped: a URL or a token is copied whole."""
    lines = (
        f"page:    {url}/",
        f"token:   {token or 'none'}",
        f"status:  {url}/v1/batches/{batch_id}",
        f"report:  {url}/v1/batches/{batch_id}/files?format=csv",
        *(f"metrics: {m}" for m in metrics),
        f"logs:    {STATE}/*.log",
    )
    for line in lines:
        # soft_wrap: rich otherwise breaks a line at the console's width (80 columns when
        # piped), mid-URL; crop=False keeps it from cutting the line off instead.
        out.print(line, soft_wrap=True, crop=False, highlight=False, markup=False)


def write_env_file(url: str, token: str | None, batch_id: str) -> None:
    """ENV_FILE: what a fresh shell needs for the README's tour against this API.

    uv is the one that runs the demo (`uv run` sets UV): `make deps` may have installed it
    into a folder that is not on a fresh shell's PATH (pip's `--user` one)."""
    uv = os.environ.get("UV") or shutil.which("uv")
    lines = [f"# the API of `pdfqueue demo`, while it runs: . {ENV_FILE}"]
    if uv:
        lines.append(f'export PATH={shlex.quote(str(Path(uv).parent))}:"$PATH"')
    lines.append(f"export PDFQUEUE_URL={shlex.quote(url)}")
    if token:
        lines.append(f"export PDFQUEUE_TOKEN={shlex.quote(token)}")
    lines.append(f"export DEMO_BATCH={shlex.quote(batch_id)}")
    fd = os.open(ENV_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the token
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")


def _api_port(port: int) -> int:
    """`port`, or a free one for 0; a clear refusal when something else holds it."""
    if port == 0:
        return free_port()
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            raise SystemExit(
                f"port {port} is taken (another demo?): stop what holds it, or choose another"
                " port, e.g. make demo DEMO_ARGS='--port 0' (any free port)"
            )
    return port


async def _prepare(settings: Settings, files: int, zip_path: Path, *, generate: bool) -> None:
    await provision(settings)
    corpus = build_corpus(files, seed=42)
    conn = await asyncpg.connect(settings.database_url)
    try:
        await seed_users(conn, corpus.users, table=DEMO_TABLE)
    finally:
        await conn.close()
    if generate:
        console.print(f"generating {files} résumés into {zip_path}")
        await asyncio.to_thread(write_zip, corpus, zip_path, seed=42)
    expected = ", ".join(f"{k} {v}" for k, v in corpus.counts().items())
    console.print(f"{len(corpus.users)} users in table {DEMO_TABLE}; expected: {expected}")


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "pdfqueue.cli.main", *args]
