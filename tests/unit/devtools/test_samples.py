"""Tests for the sample corpus generator (pdfqueue_dev.corpora.samples)."""

from __future__ import annotations

import hashlib
import inspect
import io
import re
import zipfile
from collections import Counter
from pathlib import Path

import pytest
from pypdf import PasswordType, PdfReader
from pypdf.errors import PdfReadError

from pdfqueue_dev.corpora.samples import (
    CLEAN,
    JUNK_MEMBERS,
    Corpus,
    Expect,
    Mix,
    SampleFile,
    build_corpus,
    render_pdf,
    write_zip,
)

EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
SEED = 7


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return build_corpus(200, seed=SEED)


@pytest.fixture(scope="module")
def rendered(corpus: Corpus) -> dict[str, bytes]:
    return {f.name: render_pdf(f, seed=SEED) for f in corpus.files}


def _text(data: bytes) -> tuple[str, int]:
    reader = PdfReader(io.BytesIO(data), strict=True)
    return "\n".join(p.extract_text() for p in reader.pages), len(reader.pages)


def _of(corpus: Corpus, kind: str) -> list[SampleFile]:
    files = [f for f in corpus.files if f.kind == kind]
    assert files, f"no {kind} file in the corpus"
    return files


def test_same_seed_same_corpus_and_bytes(corpus: Corpus) -> None:
    again = build_corpus(200, seed=SEED)
    assert again == corpus
    for f in corpus.files[:25]:
        assert render_pdf(f, seed=SEED) == render_pdf(f, seed=SEED)
    enc = _of(corpus, "encrypted")[0]
    assert render_pdf(enc, seed=SEED) == render_pdf(enc, seed=SEED)


def test_different_seed_differs(corpus: Corpus) -> None:
    other = build_corpus(200, seed=SEED + 1)
    assert other.files != corpus.files
    assert other.users != corpus.users
    f = corpus.files[0]
    assert render_pdf(f, seed=SEED) != render_pdf(f, seed=SEED + 1)


def test_zip_bytes_are_reproducible(tmp_path: Path) -> None:
    c = build_corpus(12, seed=3)
    a = write_zip(c, tmp_path / "a.zip", seed=3).read_bytes()
    b = write_zip(c, tmp_path / "b.zip", seed=3).read_bytes()
    assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest()


def test_counts_add_up_and_follow_mix(corpus: Corpus) -> None:
    counts = corpus.counts()
    assert set(counts) == {e.value for e in Expect}
    assert sum(counts.values()) == 200
    kinds = Counter(f.kind for f in corpus.files)
    mix = Mix()
    for kind, share in vars(mix).items():
        assert abs(kinds[kind] - 200 * share) <= 2, (kind, kinds[kind])
    assert counts[Expect.LINKED] == kinds["known"]
    assert counts[Expect.NO_MATCH] == kinds["no_email"] + kinds["unknown_email"]
    assert counts[Expect.ALREADY] == kinds["already_linked"]
    assert counts[Expect.FAILED] == kinds["corrupt"] + kinds["encrypted"]


def test_clean_mix_is_all_linked() -> None:
    c = build_corpus(30, seed=1, mix=CLEAN, extra_users=5)
    assert c.counts() == {"linked": 30, "skipped_no_match": 0,
                          "skipped_already_exists": 0, "failed": 0}  # fmt: skip
    assert len(c.users) == 35


def test_users_and_files_are_consistent(corpus: Corpus) -> None:
    users = {u.email: u for u in corpus.users}
    assert [u.id for u in corpus.users] == list(range(1, len(corpus.users) + 1))
    assert len(users) == len(corpus.users)
    assert all(u.email == u.email.lower() for u in corpus.users)
    owned = [f.email for f in corpus.files if f.kind in ("known", "already_linked")]
    assert len(owned) == len(set(owned)), "a user appears in more than one file"
    assert len(corpus.users) == len(owned) + 50
    for f in corpus.files:
        assert re.fullmatch(r"resumes/\d{5}-[a-z]+\.pdf", f.name)
        if f.kind == "known":
            assert f.email in users
            assert users[f.email].pdf_url is None
        elif f.kind == "already_linked":
            assert f.email in users
            assert users[f.email].pdf_url == f"pdfs/legacy/{users[f.email].id}.pdf"
        else:
            assert f.email not in users
    assert len({f.name for f in corpus.files}) == 200


def test_known_files_contain_their_email_first_among_users(
    corpus: Corpus, rendered: dict[str, bytes]
) -> None:
    users = {u.email for u in corpus.users}
    mixed_case = decoy_first = last_page_only = 0
    for f in _of(corpus, "known") + _of(corpus, "already_linked"):
        text, pages = _text(rendered[f.name])
        assert 1 <= pages <= 3
        assert f.email is not None
        assert f.email in text.lower()
        found = EMAIL.findall(text)
        first_user = next(e for e in found if e.lower() in users)
        assert first_user.lower() == f.email
        mixed_case += first_user != f.email
        decoy_first += found[0].lower() != f.email
        first_page = PdfReader(io.BytesIO(rendered[f.name])).pages[0].extract_text()
        last_page_only += f.email not in first_page.lower()
    # The tricky variants are present (~15 % / ~10 % / ~10 % of 144 known files).
    assert 8 <= mixed_case <= 40
    assert 4 <= decoy_first <= 30
    assert 4 <= last_page_only <= 30


def test_no_email_and_unknown_email(corpus: Corpus, rendered: dict[str, bytes]) -> None:
    users = {u.email for u in corpus.users}
    for f in _of(corpus, "no_email"):
        text, pages = _text(rendered[f.name])
        assert 1 <= pages <= 3
        assert "@" not in text
        assert len(text) > 300  # still a real-looking résumé
        assert (f.expect, f.reason) == (Expect.NO_MATCH, "no_email")
    for f in _of(corpus, "unknown_email"):
        text, _ = _text(rendered[f.name])
        found = {e.lower() for e in EMAIL.findall(text)}
        assert f.email in found
        assert not found & users
        assert (f.expect, f.reason) == (Expect.NO_MATCH, "no_user")


def test_encrypted_needs_a_password(corpus: Corpus, rendered: dict[str, bytes]) -> None:
    for f in _of(corpus, "encrypted"):
        data = rendered[f.name]
        assert data.startswith(b"%PDF-")
        reader = PdfReader(io.BytesIO(data))
        assert reader.is_encrypted
        assert reader.decrypt("") == PasswordType.NOT_DECRYPTED
        assert f.email is not None
        assert f.email.encode() not in data  # content is really encrypted
        assert (f.expect, f.reason) == (Expect.FAILED, "encrypted")


def test_corrupt_is_unreadable(corpus: Corpus, rendered: dict[str, bytes]) -> None:
    for f in _of(corpus, "corrupt"):
        data = rendered[f.name]
        assert data.startswith(b"%PDF-")
        intact = render_pdf(SampleFile(f.name, "known", f.email, Expect.LINKED, None), seed=SEED)
        assert len(data) < 0.6 * len(intact)
        try:
            pages = len(PdfReader(io.BytesIO(data), strict=True).pages)
        except (PdfReadError, ValueError, KeyError):
            pages = 0
        assert pages == 0
        assert (f.expect, f.reason) == (Expect.FAILED, "unreadable")


def test_write_zip_members(tmp_path: Path) -> None:
    c = build_corpus(20, seed=SEED)
    path = write_zip(c, tmp_path / "batch.zip", seed=SEED)
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        pdfs = [n for n in names if n.startswith("resumes/") and n.endswith(".pdf")]
        assert pdfs == [f.name for f in c.files]
        assert set(names) - set(pdfs) == set(JUNK_MEMBERS)
        assert zf.getinfo("resumes/").is_dir()
        assert zf.getinfo("__MACOSX/._x").file_size > 0
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in infos if not i.is_dir())
        assert zf.testzip() is None
        for f in c.files[:3]:
            assert zf.read(f.name) == render_pdf(f, seed=SEED)
    plain = write_zip(c, tmp_path / "plain.zip", seed=SEED, junk=False)
    with zipfile.ZipFile(plain) as zf:
        assert zf.namelist() == [f.name for f in c.files]


def test_write_zip_streams_one_file_at_a_time() -> None:
    # Memory stays bounded: each PDF is rendered and written inside the loop, never collected.
    src = inspect.getsource(write_zip)
    loop = src[src.index("for f in corpus.files") :]
    assert "zf.writestr(info(f.name), render_pdf(f, seed=seed))" in loop
    assert "[render_pdf" not in src
    assert "{render_pdf" not in src
