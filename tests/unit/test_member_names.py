"""Member names: bounded at listing, rendered as text every store takes, one file's fault."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from pdfqueue.domain.names import MAX_MEMBER_NAME_BYTES, REPLACEMENT, safe_name, too_long
from pdfqueue.stores.storage.local import FileBackend
from pdfqueue_worker.archive import Limits, list_members

LIMITS = Limits(
    max_members=50,
    max_member_bytes=1_000_000,
    max_total_bytes=5_000_000,
    max_ratio=100,
    max_directory_bytes=1_000_000,
)
PDF = b"%PDF-1.4\n" + b"x" * 500 + b"\n%%EOF\n"

NAMES = {
    "ascii": "a" * 5000 + ".pdf",
    "cjk": "\u5c65" * 2000 + ".pdf",
    "emoji": "\U0001f600" * 1500 + ".pdf",
    "combining": ("e\u0301" * 1200) + ".pdf",
    "nul-and-controls": "\x00\x01\x1b[31m\x7f\x85" * 400 + ".pdf",
    "surrogates": "\ud800\udfff" * 800 + ".pdf",
    "bidi": "\u202e\u2066" * 600 + "fdp.exe",
}


@pytest.mark.parametrize("name", NAMES.values(), ids=list(NAMES))
def test_a_safe_name_is_bounded_valid_utf8_without_nul(name: str) -> None:
    shown = safe_name(name)
    encoded = shown.encode("utf-8")  # strict: no lone surrogate survives
    assert len(encoded) <= MAX_MEMBER_NAME_BYTES
    assert "\x00" not in shown
    assert shown.endswith(safe_name(name[-3:]))  # the end (the extension) is kept


def test_a_name_that_fits_is_kept_as_it_is() -> None:
    name = "Lebensl\u00e4ufe/\u5c65\u6b74\u66f8 (2024) \U0001f600.pdf"
    assert safe_name(name) == name
    assert not too_long("x" * (MAX_MEMBER_NAME_BYTES - 4) + ".pdf")
    assert too_long("x" * (MAX_MEMBER_NAME_BYTES - 3) + ".pdf")
    assert too_long("\u5c65" * (MAX_MEMBER_NAME_BYTES // 3 + 1))  # bytes, not characters


def test_what_no_text_column_holds_is_replaced_the_rest_kept() -> None:
    """NUL and lone surrogates become U+FFFD; other controls and bidi marks are data."""
    assert safe_name("a\x00b\ud800c.pdf") == f"a{REPLACEMENT}b{REPLACEMENT}c.pdf"
    assert safe_name("tab\there\r\n\x1b[31m\u202e.pdf") == "tab\there\r\n\x1b[31m\u202e.pdf"


def _zip(tmp_path: Path, members: dict[str, bytes]) -> FileBackend:
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return FileBackend(tmp_path)


def test_long_names_fail_their_file_and_only_it(tmp_path: Path) -> None:
    long_pdf, long_cjk, long_txt = (
        "a" * 3000 + ".pdf",
        "\u5c65" * 1000 + ".pdf",
        "n" * 3000 + ".txt",
    )
    backend = _zip(
        tmp_path, {"ok.pdf": PDF, long_pdf: PDF, long_cjk: PDF, long_txt: b"hi", "z.pdf": PDF}
    )
    listing = list_members(backend, "a.zip", LIMITS)
    assert [m.name for m in listing.pdfs] == ["ok.pdf", "z.pdf"]
    assert [(i, why.reason) for i, _, why in listing.rejected] == [
        (1, "name_too_long"),
        (2, "name_too_long"),
    ]
    assert [(i, reason) for i, _, reason in listing.ignored] == [(3, "not_a_pdf")]
    for _, name, _ in [*listing.rejected, *listing.ignored]:
        assert len(name.encode()) <= MAX_MEMBER_NAME_BYTES
    assert all(len(str(why)) < 400 for _, _, why in listing.rejected)  # logs stay bounded too


def test_a_name_not_the_utf8_it_claims_fails_its_file_not_the_archive(tmp_path: Path) -> None:
    backend = _zip(tmp_path, {"caf\u00e9.pdf": PDF, "fine.pdf": PDF})
    raw = (tmp_path / "a.zip").read_bytes()
    (tmp_path / "a.zip").write_bytes(raw.replace("caf\u00e9".encode(), b"caf\xff\xfe"))
    listing = list_members(backend, "a.zip", LIMITS)
    assert [m.name for m in listing.pdfs] == ["fine.pdf"]
    assert [(name, why.reason) for _, name, why in listing.rejected] == [
        (f"caf{REPLACEMENT}{REPLACEMENT}.pdf", "unsafe_name")
    ]


def test_a_listed_name_is_cut_at_nul_as_zipfile_does(tmp_path: Path) -> None:
    backend = _zip(tmp_path, {"tab\there\u202e.pdf": PDF, "x.pdf\x00.exe": PDF})
    names = [m.name for m in list_members(backend, "a.zip", LIMITS).pdfs]
    assert names == ["tab\there\u202e.pdf", "x.pdf"]
