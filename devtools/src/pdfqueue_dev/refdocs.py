"""Writes the reference pages of docs/ from the code: settings, CLI, metrics, outcomes, limits.

Run `uv run python -m pdfqueue_dev.refdocs` (or `make docs-refs`) after changing any of them;
`tests/unit/test_generated_docs.py` fails while a page is stale. The chart's values table and
schema come from values.yaml's annotations instead: see `pdfqueue_dev.chartschema`.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import Counter, Gauge, Histogram

from pdfqueue.cli.main import EXIT_CODES, build_parser
from pdfqueue.domain.advice import ADVICE, BATCH_ADVICE
from pdfqueue.domain.errors import is_transient, transient_reasons
from pdfqueue.domain.models import Outcome
from pdfqueue.domain.names import MAX_MEMBER_NAME_BYTES
from pdfqueue.domain.settings import CONCERNS, Settings
from pdfqueue.observability import metrics
from pdfqueue.webhooks import MAX_URL_CHARS

ROOT = Path(__file__).resolve().parents[3]
COMMAND = "uv run python -m pdfqueue_dev.refdocs"

SKIP_REASONS = {
    Outcome.SKIPPED_NO_MATCH: ("no_email", "no_user", "needs_ocr"),
    Outcome.SKIPPED_AMBIGUOUS: ("ambiguous",),
    Outcome.SKIPPED_ALREADY_EXISTS: ("already_linked", "duplicate"),
}
"""The reasons of each skip; every other reason is a `failed` file's."""
OUTCOME_MEANING = {
    Outcome.LINKED: "The PDF is stored and its user's `pdf_url` points at it.",
    Outcome.SKIPPED_NO_MATCH: "No address in the PDF belongs to a user: nothing was linked.",
    Outcome.SKIPPED_AMBIGUOUS: (
        "Two different users' addresses where the owner's belongs: counted, reported, never"
        " guessed."
    ),
    Outcome.SKIPPED_ALREADY_EXISTS: "The user already has a PDF: nothing was replaced.",
    Outcome.FAILED: "The file could not be read or stored; the reason says why.",
}


def header(title: str, source: str) -> str:
    return (
        f"# {title}\n\n"
        f"*Generated from {source} by `{COMMAND}` (`make docs-refs`): edit the source, not"
        " this page.*\n"
    )


def cell(text: str) -> str:
    """One table cell: a single line, pipes escaped, `<` outside code spans kept as text."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


# --- settings -------------------------------------------------------------------------------


def _field_docs() -> Iterator[tuple[str, str, str, str]]:
    """(section, field name, type as written, docstring) of Settings: one section per part
    of it (`CONCERNS`, titled by the first line of its docstring), fields in source order."""
    for part in CONCERNS:
        source = textwrap.dedent(inspect.getsource(part))
        cls = ast.parse(source).body[0]
        assert isinstance(cls, ast.ClassDef)
        title = (inspect.getdoc(part) or part.__name__).splitlines()[0].rstrip(".")
        # a section's pointer to its docs page is for readers of the code
        section = re.sub(r"\s*\(docs/[^)]*\)", "", title)
        body = cls.body
        for i, node in enumerate(body):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            nxt = body[i + 1] if i + 1 < len(body) else None
            doc = ""
            if isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                doc = str(nxt.value.value)
            yield section, node.target.id, _type(node.annotation), doc


def _env_names(name: str) -> str:
    alias = Settings.model_fields[name].validation_alias
    if alias is None:
        return f"`PDFQUEUE_{name.upper()}`"
    choices = getattr(alias, "choices", [alias])
    return " or ".join(f"`{c}`" for c in choices)


class _Unannotated(ast.NodeTransformer):
    """`Annotated[X, ...]` -> `X`: the constraints are validation, the reader wants the type."""

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == "Annotated":
            inner = node.slice.elts[0] if isinstance(node.slice, ast.Tuple) else node.slice
            visited: ast.AST = self.visit(inner)
            return visited
        return self.generic_visit(node)


def _type(annotation: ast.expr) -> str:
    return ast.unparse(_Unannotated().visit(annotation))


_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))


def _bounds(name: str) -> str:
    """The field's numeric limits, as validated at start: `≥ 1, ≤ 1000`."""
    found = [
        f"{sign} {getattr(m, attr)}"
        for m in Settings.model_fields[name].metadata
        for attr, sign in _BOUNDS
        if getattr(m, attr, None) is not None
    ]
    return ", ".join(found)


def _default(name: str) -> str:
    field = Settings.model_fields[name]
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, frozenset | tuple | list):
        return f"`{','.join(sorted(value))}`" if value else "empty"
    if isinstance(value, dict):
        return f"`{json.dumps(value)}`" if value else "`{}`"
    return f"`{value}`"


def settings_page() -> str:
    out = [
        header("Settings reference", "`core/src/pdfqueue/domain/settings/`"),
        "Every setting is an environment variable, read once at start by the one `Settings`"
        " class. AWS credentials use the standard `AWS_*` variables. A value that does not"
        " validate stops the process with the setting's name, never its value.\n",
    ]
    section = None
    for sec, name, kind, doc in _field_docs():
        if sec != section:
            section = sec
            out += [
                f"\n## {sec[0].upper() + sec[1:]}\n",
                "| variable | type | default | meaning |",
                "|---|---|---|---|",
            ]
        kind_cell = cell(f"`{kind}` {_bounds(name)}".strip())
        out.append(f"| {_env_names(name)} | {kind_cell} | {cell(_default(name))} | {cell(doc)} |")
    return "\n".join(out) + "\n"


# --- CLI ------------------------------------------------------------------------------------


class UndescribedOption(ValueError):
    """An argument of the CLI has no help text, so its reference row would say nothing."""


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.option_strings:
            metavar = "" if action.nargs == 0 else f" {action.metavar or action.dest.upper()}"
            name = ", ".join(f"{o}{metavar}" for o in action.option_strings)
        else:
            name = str(action.metavar or action.dest)
        what = action.help or ""
        if not what.strip() or what == argparse.SUPPRESS:
            raise UndescribedOption(
                f"{parser.prog} {name} has no help text: give its add_argument a help="
            )
        if action.choices and action.option_strings:
            what = f"{what} (one of {', '.join(map(str, action.choices))})".strip()
        rows.append(f"| `{name}` | {cell(what)} |")
    return rows


def _commands(
    parser: argparse.ArgumentParser, path: str = ""
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name after `pdfqueue`, help, parser) of each command, nested ones after their parent."""
    sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if sub is None:
        return
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name in sorted(sub.choices):
        full = f"{path} {name}".strip()
        if not helps.get(name):
            raise UndescribedOption(
                f"pdfqueue {full} has no help text: give its add_parser a help="
            )
        yield full, str(helps[name]), sub.choices[name]
        yield from _commands(sub.choices[name], full)


def cli_page() -> str:
    """The CLI reference; UndescribedOption if a command or an argument has no help text."""
    commands = list(_commands(build_parser()))
    out = [
        header("CLI reference", "the parser of `core/src/pdfqueue/cli/main.py`"),
        "Run from a checkout as `uv run pdfqueue COMMAND`. Client commands read `PDFQUEUE_URL`"
        " and `PDFQUEUE_TOKEN` (or `--url`, `--token`); each `--help` ends with an example.\n",
        "| command | what it does |",
        "|---|---|",
    ]
    out += [
        f"| [`{n}`](#pdfqueue-{n.replace(' ', '-')}) | {cell(what)} |" for n, what, _ in commands
    ]
    for name, what, command in commands:
        usage = command.format_usage().removeprefix("usage: ").strip()
        out += [f"\n## pdfqueue {name}\n", f"{what}\n", "```", " ".join(usage.split()), "```\n"]
        rows = _options(command)
        if rows:
            out += ["| argument | meaning |", "|---|---|", *rows]
    out += ["\n## Exit codes\n", "```", EXIT_CODES.removeprefix("exit codes:\n"), "```"]
    return "\n".join(out) + "\n"


# --- metrics --------------------------------------------------------------------------------


def metrics_page() -> str:
    exported_by: dict[int, list[str]] = {}
    for group, members in metrics._GROUPS.items():
        for metric in members:
            exported_by.setdefault(id(metric), []).append(group)
    processes = {
        "queue": "API, worker (the queue gauges)",
        "api": "API",
        "worker": "worker",
        "operator": "operator",
        "postgres": "API, worker (the PostgreSQL gauges)",
        "storage": "API, worker (the object-store gauge)",
        "election": "operator",
    }
    out = [
        header("Metrics reference", "`core/src/pdfqueue/observability/metrics.py`"),
        "Every process serves its own `/metrics`; see [Observability](observability.md).\n",
        "| metric | type | labels | exported by | meaning |",
        "|---|---|---|---|---|",
    ]
    collected = [m for m in vars(metrics).values() if isinstance(m, Counter | Gauge | Histogram)]
    for metric in sorted(collected, key=lambda m: m._name):
        name = metric._name + ("_total" if metric._type == "counter" else "")
        groups = exported_by.get(id(metric))
        where = ", ".join(processes.get(g, g) for g in groups) if groups else "every process"
        labels = ", ".join(f"`{label}`" for label in metric._labelnames)
        out.append(
            f"| `{name}` | {metric._type} | {labels} | {where} | {cell(metric._documentation)} |"
        )
    return "\n".join(out) + "\n"


# --- outcomes and reasons -------------------------------------------------------------------


def outcomes_page() -> str:
    skip = {r: o for o, reasons in SKIP_REASONS.items() for r in reasons}
    out = [
        header(
            "Outcomes and reasons",
            "`models.py`, `errors.py` and `advice.py` of `core/src/pdfqueue/domain/`",
        ),
        "Every counted file ends with exactly one outcome; every outcome but `linked` has a"
        " reason. A file retry (`pdfqueue retry`, `POST /v1/batches/{id}/retry`) re-runs the"
        " failed files whose reason may pass; `--all-failed` re-runs every failed file.\n",
        "| outcome | meaning |",
        "|---|---|",
        *(f"| `{o.value}` | {cell(OUTCOME_MEANING[o])} |" for o in Outcome),
        "\nMembers that are not PDFs by name are listed as `ignored` and not counted; a file"
        " being retried shows `retrying` until its new outcome. How addresses are found and"
        " when two users make a file `skipped_ambiguous`:"
        " [Extraction](../architecture/extraction.md).\n",
        "## Reasons\n",
        "| reason | outcome | what happened | what to do | retried by a plain retry |",
        "|---|---|---|---|---|",
    ]
    for reason, (what, todo) in ADVICE.items():
        outcome = skip.get(reason, Outcome.FAILED).value
        retried = "yes" if outcome == "failed" and is_transient(reason) else "no"
        out.append(f"| `{reason}` | `{outcome}` | {cell(what)} | {cell(todo)} | {retried} |")
    transient = [r for r in transient_reasons() if r not in ADVICE]
    out += [
        "\nA transient failure (a dependency down, a job past its deadline) is retried with"
        " backoff up to `PDFQUEUE_MAX_TRIES`; after that the file fails with the last one of"
        " these reasons, and a plain retry re-runs it:\n",
        ", ".join(f"`{r}`" for r in transient) + ".",
        "\n## Batch reasons\n",
        "A batch that ends `FAILED` failed as a whole: its status carries `reason`, one of"
        " these codes, and `error`, the same in words (counts and limits, never a member"
        " name: the report lists the names). The page, `pdfqueue status`, the `batch.failed`"
        " webhook and the PdfBatch's `Finished` condition (its reason in CamelCase) show"
        " both; `pdfqueue upload --wait`, `watch` and `status` exit with code 4. A ZIP with"
        " at least one PDF is never refused for being small: a batch of one PDF runs.\n",
        "| reason | what happened | what to do |",
        "|---|---|---|",
        *(f"| `{r}` | {cell(what)} | {cell(todo)} |" for r, (what, todo) in BATCH_ADVICE.items()),
        "\nA store that refuses ingest's request for good fails the batch with that store's"
        " reason (`database_rejected`, `invalid_data`, `redis_rejected`, `storage_rejected`):"
        " tell the administrator. Limits: [Limits](limits.md).",
    ]
    return "\n".join(out) + "\n"


# --- limits ---------------------------------------------------------------------------------

LIMITS: tuple[tuple[str, str, str], ...] = (
    (
        "max_upload_bytes",
        "bytes of one upload (the ZIP as sent)",
        "`413` while the body streams in, nothing is kept",
    ),
    (
        "max_members",
        "entries of one ZIP (folders included)",
        "`413` at upload; a PdfBatch's ZIP: the batch `FAILED`, `too_many_members`",
    ),
    (
        "max_directory_bytes",
        "bytes of one ZIP's central directory (its list of entries)",
        "`413` at upload; a PdfBatch's ZIP: the batch `FAILED`, `too_many_members`",
    ),
    (
        "max_total_uncompressed_bytes",
        "bytes of one ZIP's members once unpacked, all together",
        "the batch `FAILED`, `archive_rejected` (checked by the worker, after the `202`)",
    ),
    (
        "max_pdf_bytes",
        "bytes of one PDF once unpacked",
        "that file `failed`, `too_large`; the rest of the batch goes on",
    ),
    (
        "max_compression_ratio",
        "unpacked / packed size of one member",
        "that file `failed`, `compression_ratio`; the rest of the batch goes on",
    ),
)
"""(setting, what it bounds, what happens past it) for the limits page, in a user's order."""


def _amount(value: object) -> str:
    """A default as a person reads it: `2 GiB (2147483648)`, `100,000`, `200`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"`{value}`"
    if isinstance(value, float):
        return f"{value:g}"
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= size and value % size == 0:
            return f"{value // size} {unit} ({value})"
    return f"{value:,}"


def limits_page() -> str:
    out = [
        header(
            "Limits",
            "`core/src/pdfqueue/domain/settings/` and the constants named below",
        ),
        "What one batch may be, and what happens past each limit. The upload page, the CLI"
        " and the API all answer with the same words: an HTTP status and a `detail` that"
        " names the limit and its setting, or a batch or file reason in the report"
        " ([Outcomes and reasons](outcomes.md)).\n",
        "## How many PDFs\n",
        "There is no minimum: a ZIP with one PDF is a batch like any other. A ZIP in which"
        " no member is a PDF by name (`.pdf`, any case), an empty one included, ends"
        " `FAILED` with reason `no_pdf_members`, and its report lists what it held. The"
        " most is `PDFQUEUE_MAX_MEMBERS` entries; batches of 50,000 PDFs are what the"
        " benchmarks run. Members that are not PDFs are listed as `ignored` and not"
        " counted; folders and archivers' metadata (`__MACOSX/`, `._*`, `.DS_Store`) are"
        " skipped.\n",
        "## Size limits (settings)\n",
        "An administrator changes each with its environment variable (in the chart:"
        " `api.maxUploadBytes` and `config.*`, see"
        " [Chart values](../operations/chart-values.md)).\n",
        "| limit | default | bounds | past it |",
        "|---|---|---|---|",
    ]
    for name, bounds, past in LIMITS:
        field = Settings.model_fields[name]
        value = field.get_default(call_default_factory=True)
        out.append(f"| {_env_names(name)} | {_amount(value)} | {cell(bounds)} | {cell(past)} |")
    out += [
        "\n## Fixed limits (constants)\n",
        "| limit | value | past it | why not a setting |",
        "|---|---|---|---|",
        f"| member name length | {MAX_MEMBER_NAME_BYTES} bytes of UTF-8 | that file `failed`,"
        " `name_too_long`; the report shows the name cut | every index over names must hold"
        " any name PostgreSQL may be given (a btree entry holds about 2,700 bytes): raising it"
        " would strand batches |",
        f"| `callback_url` length | {MAX_URL_CHARS} characters | `422` at upload | a URL"
        " longer than browsers and proxies take is a mistake, not a need |",
        "| ZIP format | ZIP or ZIP64; stored or deflate members; not encrypted, not split |"
        " `422` (not a ZIP) at upload; a member: `unsupported_compression`,"
        " `encrypted_member` | what the format and Python's `zlib` read safely |",
        "\n## Other limits\n",
        "- Per-tenant quotas (uploads per minute, bytes per day, batches at once, retries per"
        " hour) answer `429` with `Retry-After`: `PDFQUEUE_QUOTA_UPLOADS_PER_MINUTE`,"
        " `PDFQUEUE_QUOTA_BYTES_PER_DAY`, `PDFQUEUE_QUOTA_CONCURRENT_BATCHES`,"
        " `PDFQUEUE_QUOTA_RETRIES_PER_HOUR` and"
        " `PDFQUEUE_TENANT_QUOTAS` in [Settings](../operations/settings.md).",
        "- Each PDF is read within `PDFQUEUE_JOB_TIMEOUT_S` and the parser's memory cap"
        " (`timeout`, `parser_crashed`); only its first `PDFQUEUE_EXTRACT_MAX_PAGES` pages"
        " are searched for an address.",
        "- The HTTP server bounds every request's head, URL and headers before"
        " authentication (`PDFQUEUE_HTTP_MAX_HEAD_BYTES`, `PDFQUEUE_HTTP_MAX_URL_BYTES`,"
        " `PDFQUEUE_HTTP_MAX_HEADERS`, `PDFQUEUE_HTTP_HEAD_TIMEOUT_S`,"
        " `PDFQUEUE_HTTP_BODY_TIMEOUT_S`,"
        " `PDFQUEUE_HTTP_BODY_MIN_BYTES_PER_S`, `PDFQUEUE_HTTP_MAX_CONNECTIONS`):"
        " [Security](../operations/security.md).",
    ]
    return "\n".join(out) + "\n"


# --- where a module's tests are -----------------------------------------------------------

SOURCE = Path(__file__).resolve().parents[3]
"""The checkout whose code and tests the test map reads (ROOT is where pages are written)."""
PRODUCT = {
    "pdfqueue": SOURCE / "core/src/pdfqueue",
    "pdfqueue_api": SOURCE / "api/src/pdfqueue_api",
    "pdfqueue_worker": SOURCE / "worker/src/pdfqueue_worker",
    "pdfqueue_operator": SOURCE / "operator/src/pdfqueue_operator",
}
"""The shipped packages and their folders: the modules the test map lists."""


def _product_modules() -> dict[str, Path]:
    """Every shipped module (dotted name -> file), package `__init__`s that hold code too."""
    found: dict[str, Path] = {}
    for package, folder in PRODUCT.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                if not ast.parse(path.read_text()).body[1:]:  # a docstring only
                    continue
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _defined_in(module: str, name: str) -> str:
    """Where a name imported from `module` is defined: a submodule, or the module that a
    package re-exports it from (`pdfqueue.lifecycle.Lifecycle` is `...transitions`)."""
    try:
        value = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return module
    if inspect.ismodule(value):
        return value.__name__
    return getattr(value, "__module__", None) or module


def _imported_by(test: Path, modules: dict[str, Path]) -> set[str]:
    """The shipped modules a test file imports directly (at its top or inside a test)."""
    reached: set[str] = set()
    for node in ast.walk(ast.parse(test.read_text())):
        if isinstance(node, ast.Import):
            reached.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            reached.update(_defined_in(node.module, a.name) for a in node.names)
    return {m for m in reached if m in modules}


def test_map_page() -> str:
    modules = _product_modules()
    tests: dict[str, list[str]] = {name: [] for name in modules}
    for test in sorted((SOURCE / "tests").rglob("test_*.py")):
        for module in _imported_by(test, modules):
            tests[module].append(str(test.relative_to(SOURCE)))
    out = [
        header("Where a module's tests are", "the imports of `tests/`"),
        "For each shipped module, the test files that import it directly. A module missing"
        " here is reached only through others (its tests are those of its importers). Test"
        " files under `tests/unit/` test one module's logic, without services; the others"
        " are named by the guarantee they check and run on real services (see"
        " [Tests](tests.md)).\n",
    ]
    for package, folder in PRODUCT.items():
        out += [
            f"\n## {package} (`{folder.relative_to(SOURCE)}`)\n",
            "| module | tests |",
            "|---|---|",
        ]
        for name, path in modules.items():
            if name.split(".")[0] != package or not tests[name]:
                continue
            where = path.relative_to(folder)
            files = ", ".join(f"`{t.removeprefix('tests/')}`" for t in tests[name])
            out.append(f"| `{where}` | {files} |")
    return "\n".join(out) + "\n"


PAGES: dict[str, Callable[[], str]] = {
    "docs/operations/settings.md": settings_page,
    "docs/operations/metrics.md": metrics_page,
    "docs/user-guide/cli-reference.md": cli_page,
    "docs/user-guide/outcomes.md": outcomes_page,
    "docs/user-guide/limits.md": limits_page,
    "docs/development/test-map.md": test_map_page,
}
"""Each generated page (relative to the repository root) and the function that writes it."""


def render() -> dict[str, str]:
    return {path: build() for path, build in PAGES.items()}


def main() -> int:
    for path, text in render().items():
        target = ROOT / path
        if not target.exists() or target.read_text() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
