"""The seed peer (BullMQ + pdf-parse, ../shared/peers/seed-node beside this repository) on the
same services."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from bench import corpus
from bench.pipeline import Bench
from bench.procs import Sampler
from pdfqueue_dev.corpora.documents import Density
from pdfqueue_dev.processes import Child

SOURCE = Path(
    os.environ.get("PDFQUEUE_BENCH_PEER")
    or Path(__file__).resolve().parents[2] / "shared/peers/seed-node"
)
"""The peer's sources: `../shared/peers/seed-node` next to this repository by default."""
WORKDIR = Path(os.environ.get("PDFQUEUE_BENCH_PEER_DIR", "/tmp/seed-node-peer"))
QUEUE_KEYS = "bull:pdf-bulk-upload:*"
"""The peer's BullMQ queue; `batch:b<ms>` hashes hold its counters."""
PEER_OBJECT = re.compile(r"pdfs/\d+/(\d{13})\.pdf")
"""The peer's object names: `pdfs/<user id>/<Date.now()>.pdf` (pdfqueue's end in a sha256)."""


def install() -> Path:
    """Copy the peer somewhere writable and `npm install` it once."""
    if not (WORKDIR / "node_modules").is_dir() or not (WORKDIR / "peer.js").exists():
        WORKDIR.mkdir(parents=True, exist_ok=True)
        for name in ("peer.js", "package.json"):
            shutil.copyfile(SOURCE / name, WORKDIR / name)
        print(f"  npm install in {WORKDIR}")
        subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=WORKDIR,
            check=True,
            timeout=600,
        )
    return WORKDIR


def peer_env(bench: Bench) -> dict[str, str]:
    redis = urlparse(bench.env["PDFQUEUE_REDIS_URL"])
    pg = urlparse(bench.database_url)
    return {
        **os.environ,
        "REDIS_PORT": str(redis.port or 6379),
        "PGHOST": pg.hostname or "127.0.0.1",
        "PGPORT": str(pg.port or 5432),
        "PGUSER": pg.username or "postgres",
        "PGPASSWORD": pg.password or "",
        "PGDATABASE": pg.path.lstrip("/") or "postgres",
        "PGOPTIONS": f"-c search_path={bench.schema}",  # its `users` is the bench's own table
        "S3_ENDPOINT": bench.env["PDFQUEUE_S3_ENDPOINT_URL"],
        "S3_BUCKET": bench.bucket,
    }


def _peer_keys(bench: Bench) -> set[bytes]:
    with bench.redis() as r:
        return set(r.scan_iter(match=QUEUE_KEYS, count=1000)) | set(
            r.scan_iter(match="batch:b*", count=1000)
        )


def _clean(bench: Bench, existing: set[bytes], window_ms: tuple[int, int]) -> int:
    """Delete what this peer run left: its job (which holds the whole ZIP) and its objects.

    Only Redis keys that did not exist before the run are removed. The peer names objects
    `pdfs/<user id>/<Date.now()>.pdf` at the bucket's root; those stamped inside this run's
    window go, including copies whose link a second PDF overwrote. Returns that count.
    """
    with bench.redis() as r:
        new = _peer_keys(bench) - existing
        if new:
            r.delete(*new)
        ids = [k.rsplit(b":", 1)[1] for k in new if k.rsplit(b":", 1)[1].isdigit()]
        for name in ("completed", "failed"):
            if ids:  # the job ids just deleted
                r.zrem(f"bull:pdf-bulk-upload:{name}", *ids)
    s3, lo, hi = bench.s3(), *window_ms
    keys = [
        {"Key": o["Key"]}
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=bench.bucket, Prefix="pdfs/"
        )
        for o in page.get("Contents", [])
        if (m := PEER_OBJECT.fullmatch(o["Key"])) and lo <= int(m.group(1)) <= hi
    ]
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=bench.bucket, Delete={"Objects": keys[i : i + 1000]})
    return len(keys)


def log_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def result_line(log: Path, offset: int) -> str | None:
    """The peer's `{"peer": ...}` line written past `offset` of its log: the run just ended,
    not an earlier round of the same corpus appended before it."""
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return next((x for x in text.splitlines() if x.startswith('{"peer')), None)


def run_peer(
    bench: Bench, n: int, seed: int, timeout_s: float, density: Density = Density.SPARSE
) -> dict[str, Any]:
    """Reseed `users`, run `node peer.js ZIP` once, parse its {"peer"...} line."""
    workdir = install()
    planned, path = corpus.corpus(n, seed, density)
    asyncio.run(corpus.reseed(bench.database_url, bench.schema, planned))
    existing = _peer_keys(bench)
    t0_ms = int(time.time() * 1000)
    argv = ["node", str(workdir / "peer.js"), str(path)]  # node_modules resolve next to peer.js
    # one log per corpus: Child appends, and this run's result line is read back from it
    name = f"peer-{density}-{n}"
    offset = log_size(bench.log_dir / f"{name}.log")
    child = Child(name, argv, peer_env(bench), bench.log_dir, launcher=False)
    sampler = Sampler(0.1, services=bench.services)
    sampler.watch("peer", child.main_pid)
    started = time.monotonic()
    sampler.start()
    try:
        child.proc.wait(timeout=timeout_s)
        status = "COMPLETED" if child.proc.returncode == 0 else f"EXIT({child.proc.returncode})"
    except subprocess.TimeoutExpired:
        status = "TIMEOUT"
    finally:
        sampler.stop()
        child.stop(timeout_s=5)
    wall = time.monotonic() - started
    line = result_line(child.log_path, offset)
    linked_db, _ = asyncio.run(corpus.linked_in_db(bench.database_url, bench.schema))
    objects = _clean(bench, existing, (t0_ms, int(time.time() * 1000)))
    result: dict[str, Any] = {
        "system": "seed-node",
        "files": n,
        "status": status if line else f"{status}, no result line",
        "process_wall_s": round(wall, 2),
        "linked_in_db": linked_db,
        "objects_written": objects,
        "resources": sampler.report(),
    }
    if line:
        out = json.loads(line)
        result.update(
            seconds=float(out["seconds"]),
            total_files=int(out.get("totalFiles", 0)),
            processed=int(out.get("processed", 0)),
            linked=int(out.get("linked", 0)),
            skipped_no_match=int(out.get("skipped_no_match", 0)),
            skipped_already_exists=int(out.get("skipped_already_exists", 0)),
            failed=int(out.get("failed", 0)),
            unhandled_rejections=int(out.get("unhandled_rejections", 0)),
        )
    else:
        result["log_tail"] = child.log_tail()
    return result
