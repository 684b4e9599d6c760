"""`pdfqueue` as its own process, as a person's shell runs it: into a closed pipe or `head`,
and stopped with Ctrl-C. Never a traceback."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pdfqueue.cli.main import EXIT_INTERRUPTED, EXIT_PIPE_CLOSED
from pdfqueue.domain.settings import Settings
from tests.support.helpers import ACME_TOKEN, MakeCorpus, settings_env

COMMAND = [sys.executable, "-m", "pdfqueue.cli.main"]
LINE_WAIT_S = 60
"""A bound on waiting for the command's next line (a loaded machine starts Python slowly)."""


def environment(settings: Settings, url: str) -> dict[str, str]:
    """The test's stores (for the administrator's commands), its API and acme's token."""
    return settings_env(settings, PDFQUEUE_URL=url, PDFQUEUE_TOKEN=ACME_TOKEN, COLUMNS="80")


async def uploaded(path: Path, env: dict[str, str]) -> str:
    """The id of a batch of `path`, uploaded by the command as a person would."""
    made = await asyncio.to_thread(
        subprocess.run,
        [*COMMAND, "upload", str(path)],
        capture_output=True,
        env=env,
        text=True,
        check=True,
    )
    return made.stdout.strip()


def into_closed_pipe(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run with stdout a pipe whose reader has gone: the first write fails (EPIPE)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [*COMMAND, *argv],
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)


@pytest.mark.timeout(600)
async def test_no_command_prints_a_traceback_into_a_closed_pipe(
    served: str, settings: Settings, make_corpus: MakeCorpus
) -> None:
    """`pdfqueue files ID --csv | head` printed BrokenPipeError's traceback."""
    env = environment(settings, served)
    _, path = await make_corpus(2, seed=21)
    batch_id = await uploaded(path, env)
    writers = [  # each subcommand once, each way of writing stdout at least once
        ["upload", str(path)],  # print
        ["status", batch_id, "--json"],  # JSON
        ["batches"],  # a table
        ["files", batch_id, "--csv"],  # CSV
        ["cancel", batch_id],
        ["watch", batch_id],  # cancelled just now: it prints the summary and ends
        ["admin", "batches", "--limit", "3"],
        ["admin", "requeue", batch_id, "--json"],
        ["purge", "--dry-run", "--json", "--tenant", "nobody-has-this-tenant"],
        ["audit", "--since", "1h", "--json"],
    ]
    for argv in writers:
        done = await asyncio.to_thread(into_closed_pipe, argv, env)
        assert "Traceback" not in done.stderr, (argv, done.stderr)
        assert "Error" not in done.stderr, (argv, done.stderr)
        assert done.returncode == EXIT_PIPE_CLOSED, (argv, done.returncode, done.stderr)
    # Those that write only to stderr end as they would anyway.
    for argv in (["retry", batch_id], ["status", "nope"]):
        done = await asyncio.to_thread(into_closed_pipe, argv, env)
        assert "Traceback" not in done.stderr, (argv, done.stderr)
        assert done.returncode == 1, (argv, done.returncode, done.stderr)
        assert "error:" in done.stderr
    # Cancelled moments ago, the batch may still be within its jobs' settling time: erase
    # then says it waits for them (stderr), whatever the pipe; nothing else is said.
    done = await asyncio.to_thread(into_closed_pipe, ["erase", batch_id, "--json"], env)
    assert done.returncode == EXIT_PIPE_CLOSED, done.stderr
    said = [line for line in done.stderr.splitlines() if line]
    assert all(line.startswith("waiting ") for line in said), done.stderr
    done = await asyncio.to_thread(into_closed_pipe, ["files", "--help"], env)
    assert (done.returncode, done.stderr) == (0, "")  # argparse itself ignores the failed write


async def test_head_of_a_report_is_quiet(
    served: str, settings: Settings, make_corpus: MakeCorpus
) -> None:
    """What a person types: the first line, and nothing on stderr."""
    env = environment(settings, served)
    _, path = await make_corpus(2, seed=22)
    shell = f"{' '.join(COMMAND)} upload {path} && {' '.join(COMMAND)} batches --csv | head -1"
    done = await asyncio.to_thread(
        subprocess.run,
        ["/bin/sh", "-c", shell],
        capture_output=True,
        env=env,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("batch_id,file_name,status")
    assert "Traceback" not in done.stderr


@pytest.mark.timeout(180)
@pytest.mark.parametrize("command", ["watch", "upload --wait"])
async def test_ctrl_c_while_following_says_how_to_follow_again(
    served: str, settings: Settings, make_corpus: MakeCorpus, command: str
) -> None:
    """No worker runs: the batch stays PENDING until the person stops watching."""
    env = environment(settings, served)
    _, path = await make_corpus(2, seed=23)
    if command == "watch":
        argv = ["watch", await uploaded(path, env)]
    else:
        argv = ["upload", str(path), "--wait"]
    code, err = await asyncio.to_thread(stopped_while_following, argv, env)
    assert code == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    batch_id = err.split("following batch ", 1)[1][:32]
    assert f"stopped watching; the batch goes on: pdfqueue watch {batch_id}" in err


def stopped_while_following(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Start the command, wait for it to say it follows the batch, send SIGINT (Ctrl-C).
    A command that never says so fails the test within LINE_WAIT_S, and is killed."""
    with subprocess.Popen(
        [*COMMAND, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True
    ) as proc:
        assert proc.stderr is not None
        lines: queue.Queue[str] = queue.Queue()
        reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr or ()])
        reader.start()
        seen = []
        try:
            while not seen or "following batch" not in seen[-1]:
                seen.append(lines.get(timeout=LINE_WAIT_S))
        except queue.Empty:
            pytest.fail(f"never said it follows the batch: {''.join(seen)!r}")
        finally:
            if not seen or "following batch" not in seen[-1]:
                proc.kill()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(LINE_WAIT_S)
        reader.join()
        seen.extend(lines.queue)
        return code, "".join(seen)
