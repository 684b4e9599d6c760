"""`pdfqueue demo`: generate résumés, run the API and workers, upload, show the result."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
from rich.console import Console

from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.provision import provision
from pdfqueue_dev.processes import Child, ChildExited, stop_all, wait_http
from pdfqueue_dev.samples import build_corpus, seed_users, write_zip

console = Console(stderr=True)
DEMO_TABLE = "demo_users"  # never the host's real users table: the demo truncates it
STATE = Path(".pdfqueue/demo")


def register(sub: Any) -> None:
    """The `demo` command, plugged into `pdfqueue` by the `pdfqueue.commands` entry point."""
    p: argparse.ArgumentParser = sub.add_parser(
        "demo", help="run the whole pipeline on generated résumés"
    )
    p.add_argument("--files", type=int, default=300, help="résumés to generate (default 300)")
    p.add_argument("--workers", type=int, default=2, help="workers to start (default 2)")
    p.add_argument("--port", type=int, default=8000, help="the API's port (default 8000)")
    p.add_argument("--no-wait", action="store_true", help="exit when the batch is done")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return run_demo(args.files, args.workers, args.port, wait=not args.no_wait)


def run_demo(files: int, workers: int, port: int, *, wait: bool) -> int:
    """Run the whole pipeline once; with `wait`, keep serving until Ctrl-C."""
    from pdfqueue.cli.client import Client
    from pdfqueue.cli.main import follow, print_summary  # the CLI's own progress display

    env = {**os.environ, "PDFQUEUE_USERS_TABLE": DEMO_TABLE}
    settings = Settings(users_table=DEMO_TABLE)
    token = os.environ.get("PDFQUEUE_TOKEN")
    if not settings.api_tokens and not settings.allow_anonymous:
        token = secrets.token_urlsafe(32)  # the API refuses to run open unless asked to
        env["PDFQUEUE_API_TOKENS"] = f"demo:{token}"
    STATE.mkdir(parents=True, exist_ok=True)
    zip_path = STATE / f"resumes-{files}.zip"
    asyncio.run(_prepare(settings, files, zip_path, generate=not zip_path.exists()))

    url = f"http://127.0.0.1:{port}"
    status: dict[str, Any] = {"status": "not started"}
    # SIGTERM (`kill`, `timeout`, uv passing on a closing terminal's signal) and SIGHUP stop
    # the API and workers as Ctrl-C does; by default they would end this process alone.
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, _interrupt)
    children = [_spawn(["api", "--port", str(port)], env, "api")]
    children += [_spawn(["worker"], env, f"worker-{i + 1}") for i in range(workers)]
    try:
        try:
            wait_http(f"{url}/readyz", children)
        except (ChildExited, TimeoutError) as exc:
            raise SystemExit(
                f"the API and workers did not start: {exc}\nlogs: {STATE}/*.log"
            ) from exc
        client = Client(url, token or "anonymous")  # an open API takes any token
        console.print(f"uploading {zip_path} ({zip_path.stat().st_size // 1024} KiB)")
        batch_id = client.upload(zip_path)["batch_id"]
        started = time.monotonic()
        status = follow(client, batch_id)
        elapsed = time.monotonic() - started
        print_summary(status, as_json=False)
        rate = status["processed"] / elapsed
        console.print(f"{status['processed']} PDFs in {elapsed:.1f}s ({rate:.0f}/s)")
        print_links(console, url, batch_id, token)
        if wait:
            console.print("[bold]the API and workers keep running; Ctrl-C stops them[/bold]")
            while True:
                signal.pause()  # until a signal above raises KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    finally:
        stop_all(children, timeout_s=30)
        console.print("stopped the API and workers")
    return 0 if status["status"] == "COMPLETED" else 1


def print_links(out: Console, url: str, batch_id: str, token: str | None) -> None:
    """Where to look next, one line each, never wrapped: a URL or a token is copied whole."""
    lines = (
        f"page:    {url}/",
        f"token:   {token or 'none'}",
        f"status:  {url}/v1/batches/{batch_id}",
        f"report:  {url}/v1/batches/{batch_id}/files?format=csv",
        f"logs:    {STATE}/*.log",
    )
    for line in lines:
        # soft_wrap: rich otherwise breaks a line at the console's width (80 columns when
        # piped), mid-URL; crop=False keeps it from cutting the line off instead.
        out.print(line, soft_wrap=True, crop=False, highlight=False, markup=False)


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


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _spawn(args: list[str], env: dict[str, str], name: str) -> Child:
    return Child(name, [sys.executable, "-m", "pdfqueue.cli.main", *args], env, STATE)
