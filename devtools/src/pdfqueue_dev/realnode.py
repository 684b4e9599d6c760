"""The real node of tools/kube.sh and the images of tools/images.sh, for the pod tests and bench."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from pdfqueue_dev.processes import free_port

ROOT = Path(__file__).resolve().parents[3]
"""The checkout: where `run` runs its commands (the tools' paths and `git worktree` are relative
to it)."""

CHART_IMAGES = {
    "api": "API",
    "worker": "WORKER",
    "operator": "OPERATOR",
    "redis": "REDIS",
    "postgresql": "POSTGRES",
    "s3": "VERSITYGW",
    "tests": "CURL",
}
"""The chart's image values and the names `tools/images.sh refs` gives their references."""


class CommandFailed(RuntimeError):
    """A command of the real node's tooling exited non-zero; the message carries its argv, its
    exit status and the tail of what it printed."""


def run(*argv: str | Path, timeout: float = 600, env: dict[str, str] | None = None) -> str:
    """Run `argv` in the checkout and return its stdout; `CommandFailed` if it exits non-zero
    (stderr's last 4000 and stdout's last 2000 characters in the message, enough for helm's or
    kubectl's reason without a whole build log). `subprocess.TimeoutExpired` after `timeout`."""
    proc = subprocess.run(
        [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        cwd=ROOT,
    )
    if proc.returncode != 0:
        raise CommandFailed(
            f"{' '.join(map(str, argv))} exited {proc.returncode}:\n"
            f"{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}"
        )
    return proc.stdout


def node_env(node_dir: Path) -> dict[str, str]:
    """The environment for `tools/kube.sh` on `node_dir`, with ports chosen once per node
    directory: etcd's data remembers its peer URL."""
    node_dir.mkdir(parents=True, exist_ok=True)
    ports = node_dir / "ports.json"
    if not ports.exists():
        ports.write_text(json.dumps({"etcd": free_port(), "kube": free_port()}))
    chosen = json.loads(ports.read_text())
    return {
        **os.environ,
        "PDFQUEUE_ETCD_PORT": str(chosen["etcd"]),
        "PDFQUEUE_ETCD_PEER_PORT": str(chosen["etcd"] + 1),
        "PDFQUEUE_KUBE_PORT": str(chosen["kube"]),
        "PDFQUEUE_KUBE_TIMEOUT": "180",
    }


def image_refs(images_sh: Path, run: Any) -> dict[str, str]:
    """Build (cached by content hash: seconds when nothing changed) and name the images of
    `images_sh`'s checkout; `run(*argv, timeout=)` runs a command and returns its stdout."""
    run("bash", images_sh, "build", timeout=3600)
    out: str = run("bash", images_sh, "refs", timeout=600)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def chart_image_values(refs: dict[str, str]) -> dict[str, Any]:
    """The chart's image values for those images, never pulled (the node imported them)."""

    def image(name: str) -> dict[str, str]:
        repository, tag = refs[name].rsplit(":", 1)
        return {"repository": repository, "tag": tag, "pullPolicy": "Never"}

    return {value: {"image": image(name)} for value, name in CHART_IMAGES.items()}
