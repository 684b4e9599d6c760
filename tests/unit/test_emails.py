"""The email search: the same addresses as the single regex it replaced, within RFC lengths."""

from __future__ import annotations

import random
import re

import pytest

from pdfqueue_dev.corpora.samples import build_corpus
from pdfqueue_worker.emails import find_emails, normalize

# The search this module replaced (quadratic on long runs, so only ever run on short text):
# the oracle that every result on ordinary text must still equal.
REFERENCE = re.compile(
    r"[a-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[a-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}(?![a-z0-9-])",
)


def reference(text: str) -> list[str]:
    return list(dict.fromkeys(m.group(0) for m in REFERENCE.finditer(normalize(text))))


def test_same_addresses_in_the_same_order_as_the_old_regex_on_random_text() -> None:
    """Short random strings over the characters that matter (dots, @, dashes, look-alikes):
    too short for any length limit, so every result must equal the old one exactly."""
    rng = random.Random(20261130)
    alphabet = "aab.@-+ .xZ9_é\uff20\n"
    for _ in range(50_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        assert find_emails(text) == reference(text), text


def test_same_addresses_as_the_old_regex_on_the_sample_corpus() -> None:
    corpus = build_corpus(200, seed=5)
    text = "\n".join(f"{f.name} {f.email or ''} junk..{f.email}.more" for f in corpus.files)
    found = find_emails(text)
    assert found == reference(text)
    assert len(found) > 100


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "mail hr@formercorp.example, then jane@example.com.",
            ["hr@formercorp.example", "jane@example.com"],
        ),
        ("foo..bar@x.com", ["bar@x.com"]),
        (".lead@x.com trail.@x.com", ["lead@x.com"]),
        ("a@b.com+c@d.org", ["a@b.com", "+c@d.org"]),
        ("a@b.com.c@d.org", ["a@b.com", "c@d.org"]),
        ("a@a.aa@a.aa", ["a@a.aa"]),
        ("JANE\uff20EXAMPLE.COM", ["jane@example.com"]),
        ("john@acme.com" + "." * 400, ["john@acme.com"]),
    ],
)
def test_edge_cases_match_the_old_regex(text: str, expected: list[str]) -> None:
    assert find_emails(text) == expected == reference(text)


def test_local_part_is_at_most_64_characters() -> None:
    local = "x" * 64  # RFC 5321
    assert find_emails(f"see {local}@example.com") == [f"{local}@example.com"]
    assert find_emails(f"see y{local}@example.com") == []
    dotted = "a." * 40 + "b"  # 81 characters in all
    assert find_emails(f"{dotted}@example.com") == []


def test_domain_is_at_most_253_characters() -> None:
    domain = ("d" * 62 + ".") * 3 + "e" * 60 + ".com"  # every label within 63
    assert len(domain) == 253  # RFC 1035
    assert find_emails(f"to: me@{domain}") == [f"me@{domain}"]
    assert find_emails(f"to: me@d{domain}") == []
