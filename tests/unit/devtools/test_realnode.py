"""pdfqueue_dev.realnode's command runner, shared by the real-pod tests and the pods bench."""

from __future__ import annotations

import pytest

from pdfqueue_dev.realnode import ROOT, CommandFailed, run


def test_a_command_runs_in_the_checkout_and_returns_its_stdout() -> None:
    assert run("pwd").strip() == str(ROOT)
    assert (ROOT / "charts/pdfqueue/Chart.yaml").is_file()  # ROOT is the checkout, not devtools/


def test_a_failing_command_names_itself_its_status_and_its_output() -> None:
    with pytest.raises(CommandFailed) as failed:
        run("sh", "-c", "echo partial; echo 'no such release' >&2; exit 3")
    message = str(failed.value)
    assert message.startswith("sh -c echo partial;")
    assert "exited 3" in message
    assert "no such release" in message
    assert "partial" in message


def test_the_environment_given_is_the_one_the_command_sees() -> None:
    assert run("sh", "-c", "echo $ONLY_HERE", env={"ONLY_HERE": "yes"}).strip() == "yes"
