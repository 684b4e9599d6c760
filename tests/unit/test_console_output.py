"""URLs and tokens are printed whole, even piped into an 80-column console."""

from __future__ import annotations

import io
import secrets

import pytest
from rich.console import Console

from pdfqueue.cli.main import main
from pdfqueue_dev.demo import print_links


def test_urls_and_token_are_never_wrapped() -> None:
    out = io.StringIO()
    narrow = Console(file=out, width=80, force_terminal=False, color_system=None)
    token = secrets.token_urlsafe(64)  # longer than the console is wide
    batch_id = "0123456789abcdef" * 2
    url = "http://127.0.0.1:18000"
    metrics = ["http://127.0.0.1:40123/metrics", "http://127.0.0.1:40124/metrics"]
    print_links(narrow, url, batch_id, token, metrics)
    lines = out.getvalue().splitlines()
    whole = [
        token,
        f"{url}/",
        f"{url}/v1/batches/{batch_id}",
        f"{url}/v1/batches/{batch_id}/files?format=csv",
        *metrics,
    ]
    for text in whole:
        assert any(text in line for line in lines), (text, lines)


def test_an_unreachable_api_is_named_whole(capsys: pytest.CaptureFixture[str]) -> None:
    url = "http://127.0.0.1:9/" + "behind-a-long-proxy-path/" * 4  # port 9: nothing listens
    assert main(["status", "0" * 32, "--url", url, "--token", "t"]) == 1
    assert any(url in line for line in capsys.readouterr().err.splitlines())
