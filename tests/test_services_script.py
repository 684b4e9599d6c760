"""`tools/services.sh` takes as its own only a server it started for its folder."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import boto3
import pytest

from pdfqueue_dev.processes import free_port, wait_until
from tests.support.faults import SERVICES
from tests.support.tools import installed


@pytest.fixture(autouse=True, scope="module")
def _redis_installed() -> None:
    installed("redis-server", "redis")


def services(
    command: str, state: Path, port: int, only: str = "redis", **env: str
) -> subprocess.CompletedProcess[str]:
    name = {
        "redis": "PDFQUEUE_REDIS_PORT",
        "postgres": "PDFQUEUE_PG_PORT",
        "s3": "PDFQUEUE_S3_PORT",
    }[only]
    scope = [] if command == "destroy" else ["--only", only]
    return subprocess.run(
        ["bash", str(SERVICES), command, str(state), *scope],
        env={**os.environ, name: str(port), **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def answers(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_server_it_did_not_start_is_refused_and_left_alone(tmp_path: Path) -> None:
    """Another checkout's server on the port would have run this one's suite on its data."""
    port = free_port()
    foreign = subprocess.Popen(
        [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--dir",
            tmp_path,
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: answers(port), "the other redis")
        state = tmp_path / "state"
        refused = services("start", state, port)
        assert refused.returncode == 1
        assert f"127.0.0.1:{port} already answers, but not from a server started for {state}" in (
            refused.stderr
        )
        assert not (state / "redis.pid").exists()
        assert foreign.poll() is None
    finally:
        foreign.terminate()
        foreign.wait(timeout=30)


def test_its_own_server_is_taken_again(tmp_path: Path) -> None:
    port, state = free_port(), tmp_path / "state"
    try:
        assert services("start", state, port).returncode == 0
        again = services("start", state, port)
        assert again.returncode == 0
        assert f"redis already answering on 127.0.0.1:{port}" in again.stderr
    finally:
        services("stop", state, port)
    assert not answers(port)


def test_the_s3_servers_objects_go_where_pdfqueue_s3_data_says(tmp_path: Path) -> None:
    """`make bench` keeps the objects on tmpfs (the Makefile says why)."""
    port, state, objects = free_port(), tmp_path / "state", tmp_path / "objects"
    try:
        started = services("start", state, port, "s3", PDFQUEUE_S3_DATA=str(objects))
        assert started.returncode == 0, started.stderr
        assert f"(data in {objects})" in started.stderr
        client = boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id="pdfqueue",
            aws_secret_access_key="pdfqueue-secret",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket="kept-here")
        client.put_object(Bucket="kept-here", Key="a.pdf", Body=b"%PDF-1.4")
        assert (objects / "kept-here" / "a.pdf").read_bytes() == b"%PDF-1.4"
        assert not (state / "s3").exists()
    finally:
        services("stop", state, port, "s3")
    assert not answers(port)


def test_destroy_also_deletes_the_postgresql_data_kept_outside_the_folder(tmp_path: Path) -> None:
    """A folder PostgreSQL's user cannot reach (pytest's, mode 0700) gets its data in /var/tmp:
    the fault tests make one per run, 50 MB each, and nothing else would delete it."""
    port, state = free_port(), tmp_path / "state"
    try:
        started = services("start", state, port, "postgres")
        assert started.returncode == 0, started.stderr
        data = (state / "pg").resolve()
        assert (data / "PG_VERSION").exists()
        if os.geteuid() == 0:  # root runs PostgreSQL as its own user, which cannot enter tmp_path
            assert not data.is_relative_to(state), data
    finally:
        destroyed = services("destroy", state, port, "postgres")
    assert destroyed.returncode == 0, destroyed.stderr
    assert not answers(port)
    assert not state.exists()
    assert not data.exists()


def test_destroy_refuses_a_folder_start_did_not_make(tmp_path: Path) -> None:
    """A mistyped path is not emptied: destroy deletes only a folder with a service's data."""
    kept = tmp_path / "notes"
    kept.mkdir()
    (kept / "keep.txt").write_text("mine")
    refused = services("destroy", kept, free_port())
    assert refused.returncode == 1
    assert "not a services folder" in refused.stderr
    assert (kept / "keep.txt").read_text() == "mine"


def test_destroy_deletes_its_own_postgresql_folder_not_where_a_link_was_pointed(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "elsewhere"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    state = tmp_path / "state"
    (state / "redis").mkdir(parents=True)
    (state / "pg").symlink_to(victim)
    destroyed = services("destroy", state, free_port())
    assert destroyed.returncode == 0, destroyed.stderr
    assert not state.exists()
    assert (victim / "keep.txt").read_text() == "mine"
