"""Archive safety: every hostile ZIP gets a clear per-batch or per-file reason."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

from pdfqueue.errors import ArchiveRejected, NotAZipArchive
from pdfqueue.storage import FileBackend
from pdfqueue_worker.archive import Limits, MemberRejected, list_members, read_member

LIMITS = Limits(
    max_members=50, max_member_bytes=1_000_000, max_total_bytes=5_000_000, max_ratio=100
)
PDF = b"%PDF-1.4\n" + b"x" * 500 + b"\n%%EOF\n"


def make_zip(tmp_path: Path, members: dict[str, bytes], **kwargs: object) -> FileBackend:
    with zipfile.ZipFile(tmp_path / "a.zip", "w", **kwargs) as zf:  # type: ignore[arg-type]
        for name, data in members.items():
            zf.writestr(name, data)
    return FileBackend(tmp_path)


def test_classifies_pdfs_ignored_and_metadata(tmp_path: Path) -> None:
    backend = make_zip(
        tmp_path,
        {
            "dir/": b"",
            "a.pdf": PDF,
            "B.PDF": PDF,
            "notes.txt": b"hi",
            "__MACOSX/._a.pdf": b"x",
            "x/.DS_Store": b"x",
            "x/._b.pdf": b"x",
        },
        compression=zipfile.ZIP_DEFLATED,
    )
    listing = list_members(backend, "a.zip", LIMITS)
    assert [m.name for m in listing.pdfs] == ["a.pdf", "B.PDF"]
    assert listing.ignored == [(3, "notes.txt", "not_a_pdf")]
    assert listing.total_files == 2
    for m in listing.pdfs:
        assert read_member(backend, "a.zip", m) == PDF


@pytest.mark.parametrize(
    ("name", "reason"),
    [("../evil.pdf", "unsafe_name"), ("/abs.pdf", "unsafe_name"), ("a\\..\\b.pdf", "unsafe_name")],
)
def test_unsafe_names_fail_that_file(tmp_path: Path, name: str, reason: str) -> None:
    listing = list_members(make_zip(tmp_path, {name: PDF, "ok.pdf": PDF}), "a.zip", LIMITS)
    assert [m.name for m in listing.pdfs] == ["ok.pdf"]
    assert [(n, why.reason) for _, n, why in listing.rejected] == [(name, reason)]


def test_bomb_ratio_and_size_limits(tmp_path: Path) -> None:
    bomb = b"%PDF-" + b"\0" * 900_000  # deflates ~1000x
    big = b"%PDF-" + bytes(range(256)) * 5000  # over max_member_bytes, barely compressible
    listing = list_members(
        make_zip(tmp_path, {"bomb.pdf": bomb, "big.pdf": big}, compression=zipfile.ZIP_DEFLATED),
        "a.zip",
        LIMITS,
    )
    assert {n: why.reason for _, n, why in listing.rejected} == {
        "bomb.pdf": "compression_ratio",
        "big.pdf": "too_large",
    }


def test_too_many_members_and_total_size_reject_the_archive(tmp_path: Path) -> None:
    backend = make_zip(tmp_path, {f"{i}.pdf": PDF for i in range(51)})
    with pytest.raises(ArchiveRejected, match="51 members"):
        list_members(backend, "a.zip", LIMITS)
    small_total = Limits(50, 1_000_000, 2_000, 100)
    with pytest.raises(ArchiveRejected, match="uncompressed bytes"):
        list_members(make_zip(tmp_path, {f"{i}.pdf": PDF for i in range(5)}), "a.zip", small_total)


def test_overlapping_entries_are_refused(tmp_path: Path) -> None:
    """Fifield's non-recursive bomb: many directory entries pointing at one local file."""
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("one.pdf", PDF)
    data = bytearray(path.read_bytes())
    eocd = data.rfind(b"PK\x05\x06")
    cd_size, cd_offset = struct.unpack("<II", data[eocd + 12 : eocd + 20])
    entry = bytes(data[cd_offset : cd_offset + cd_size])
    copy = entry.replace(b"one.pdf", b"two.pdf")
    new_cd = entry + copy
    out = data[:cd_offset] + new_cd
    tail = bytearray(data[eocd:])
    struct.pack_into("<HHII", tail, 8, 2, 2, len(new_cd), cd_offset)
    path.write_bytes(bytes(out + tail))
    with pytest.raises(ArchiveRejected, match="overlap"):
        list_members(FileBackend(tmp_path), "a.zip", LIMITS)


def test_encrypted_member_and_unsupported_method(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("secret.pdf", PDF)
        zf.writestr(zipfile.ZipInfo("bz.pdf"), PDF, compress_type=zipfile.ZIP_BZIP2)
    data = bytearray(path.read_bytes())
    # Set the "encrypted" flag bit of secret.pdf in its central directory entry.
    cd = data.find(b"PK\x01\x02")
    data[cd + 8] |= 0x1
    path.write_bytes(bytes(data))
    listing = list_members(FileBackend(tmp_path), "a.zip", LIMITS)
    assert {n: why.reason for _, n, why in listing.rejected} == {
        "secret.pdf": "encrypted_member",
        "bz.pdf": "unsupported_compression",
    }


def test_non_utf8_names_and_zip64(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w", allowZip64=True) as zf:
        info = zipfile.ZipInfo("caf\xe9.pdf")  # cp437 name, no UTF-8 flag
        zf.writestr(info, PDF)
        with zf.open(zipfile.ZipInfo("z64.pdf"), "w", force_zip64=True) as fh:
            fh.write(PDF)
    listing = list_members(FileBackend(tmp_path), "a.zip", LIMITS)
    assert len(listing.pdfs) == 2
    for m in listing.pdfs:
        assert read_member(FileBackend(tmp_path), "a.zip", m) == PDF


def test_truncated_archive_and_corrupt_member(tmp_path: Path) -> None:
    backend = make_zip(tmp_path, {"a.pdf": PDF}, compression=zipfile.ZIP_DEFLATED)
    good = (tmp_path / "a.zip").read_bytes()
    (tmp_path / "trunc.zip").write_bytes(good[: len(good) // 2])
    with pytest.raises(NotAZipArchive):
        list_members(backend, "trunc.zip", LIMITS)
    member = list_members(backend, "a.zip", LIMITS).pdfs[0]
    broken = bytearray(good)
    broken[45:55] = b"\xff" * 10  # inside the deflate stream
    (tmp_path / "a.zip").write_bytes(bytes(broken))
    with pytest.raises(MemberRejected) as caught:
        read_member(backend, "a.zip", member)
    assert caught.value.reason == "corrupt_member"


def test_nested_zip_is_not_a_pdf(tmp_path: Path) -> None:
    inner = tmp_path / "inner.zip"
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("x.pdf", PDF)
    listing = list_members(make_zip(tmp_path, {"inner.zip": inner.read_bytes()}), "a.zip", LIMITS)
    assert listing.ignored == [(0, "inner.zip", "not_a_pdf")]
