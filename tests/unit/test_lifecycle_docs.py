"""The lifecycle's docstring and docs/architecture/lifecycle.md say which store each transition
writes first, and the code agrees: the first store each transition method touches."""

from __future__ import annotations

import ast
import inspect
import re

import pytest

from pdfqueue import lifecycle
from tests.unit.test_docs_match_code import ROOT

PAGE = ROOT / "docs/architecture/lifecycle.md"
TRANSITIONS = ("register", "start", "record", "requeue", "fail", "cancel")
STORES = {"batches": "PostgreSQL", "files": "PostgreSQL", "state": "Redis", "redis": "Redis"}
"""Lifecycle's attributes, by the store behind each."""


def first_store(method: str) -> str:
    """The store of the first `self.<store>` the method's body reaches, in source order."""
    source = inspect.getsource(getattr(lifecycle.Lifecycle, method))
    tree = ast.parse(inspect.cleandoc("\n" + source) if source.startswith(" ") else source)
    found = [
        (node.lineno, node.col_offset, STORES[node.attr])
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr in STORES
    ]
    return min(found)[2]


def claims(text: str) -> dict[str, str]:
    """What a text says each transition writes first: its table rows and its sentences."""
    said: dict[str, str] = {}
    for cells in re.findall(r"^\| (.+?) \| (PostgreSQL|Redis)\b.*\|$", text, re.M):
        for name in re.findall(r"`(\w+)`", cells[0]):
            said[name] = cells[1]
    for who, store in re.findall(
        r"([\w ,`]+?) writes? (?:the live state in )?(PostgreSQL|Redis)"
        r" first",
        text,
    ):
        names = (
            TRANSITIONS
            if re.search(r"\b(every|each) transition", who, re.I)
            else re.findall(r"\b(\w+)\b", who)
        )
        for name in names:
            if name in TRANSITIONS:
                said[name] = store
    return said


@pytest.mark.parametrize(
    "where",
    ["docs/architecture/lifecycle.md", "the docstring of pdfqueue.lifecycle"],
)
def test_what_the_docs_say_each_transition_writes_first_is_what_it_does(where: str) -> None:
    text = PAGE.read_text() if where.startswith("docs") else inspect.getdoc(lifecycle) or ""
    said = claims(" ".join(text.split()) if "docstring" in where else text)
    assert set(said) >= set(TRANSITIONS), f"{where} does not say for {set(TRANSITIONS) - set(said)}"
    wrong = {name: store for name, store in said.items() if store != first_store(name)}
    assert wrong == {}, f"{where} says these write first to the wrong store"


def test_the_check_reads_the_code() -> None:
    assert first_store("register") == "PostgreSQL"
    assert first_store("cancel") == "Redis"
    assert claims("Each transition writes the live state in Redis first")["record"] == "Redis"
