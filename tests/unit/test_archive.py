"""Archive safety: every hostile ZIP gets a clear per-batch or per-file reason."""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from pdfqueue.domain.errors import ArchiveRejected, FileRejected, NotAZipArchive
from pdfqueue.stores.storage import Backend
from pdfqueue.stores.storage.local import FileBackend
from pdfqueue_worker.archive import (
    Limits,
    list_members,
    member_span,
    plan_slices,
)
from pdfqueue_worker.payload import Member, Packed, cut, inflate
from tests.support.zipcraft import Part, build, local_header

LIMITS = Limits(
    max_members=50,
    max_member_bytes=1_000_000,
    max_total_bytes=5_000_000,
    max_ratio=100,
    max_directory_bytes=100_000,
)
PDF = b"%PDF-1.4\n" + b"x" * 500 + b"\n%%EOF\n"


def read_members(backend: Backend, key: str, members: list[Member]) -> list[bytes | FileRejected]:
    """What a process job does (`tasks/process.py`): one ranged read of the members' span,
    each member cut out of it (read further when its local header is long), then inflated."""
    start, length = member_span(members)
    data = backend.read_range(key, start, length)
    out: list[bytes | FileRejected] = []
    for m in members:
        raw, more = cut(data, start, m)
        if more and len(data) == length:  # a short read means the object ends there
            raw += backend.read_range(key, m.offset + len(raw), more)
        try:
            out.append(inflate(raw, Packed.of(m)))
        except FileRejected as exc:
            out.append(exc)
    return out


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
    assert read_members(backend, "a.zip", listing.pdfs) == [PDF, PDF]


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
    small_total = Limits(50, 1_000_000, 2_000, 100, 100_000)
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
    assert read_members(FileBackend(tmp_path), "a.zip", listing.pdfs) == [PDF, PDF]


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
    (caught,) = read_members(backend, "a.zip", [member])
    assert isinstance(caught, FileRejected)
    assert caught.reason == "corrupt_member"


def test_nested_zip_is_not_a_pdf(tmp_path: Path) -> None:
    inner = tmp_path / "inner.zip"
    with zipfile.ZipFile(inner, "w") as zf:
        zf.writestr("x.pdf", PDF)
    listing = list_members(make_zip(tmp_path, {"inner.zip": inner.read_bytes()}), "a.zip", LIMITS)
    assert listing.ignored == [(0, "inner.zip", "not_a_pdf")]


class CountingBackend(FileBackend):
    """Counts ranged reads: a run of members must cost one."""

    reads = 0

    def read_range(self, key: str, start: int, length: int) -> bytes:
        self.reads += 1
        return super().read_range(key, start, length)


def test_a_run_of_members_is_read_with_one_range_and_bad_ones_fail_alone(tmp_path: Path) -> None:
    members = {f"{i:02d}.pdf": PDF + bytes([i]) for i in range(6)}
    make_zip(tmp_path, members, compression=zipfile.ZIP_DEFLATED)
    good = (tmp_path / "a.zip").read_bytes()
    backend = CountingBackend(tmp_path)
    pdfs = list_members(backend, "a.zip", LIMITS).pdfs
    broken = bytearray(good)
    at = pdfs[2].offset + 50  # inside the third member's deflate stream
    broken[at : at + 8] = b"\xff" * 8
    (tmp_path / "a.zip").write_bytes(bytes(broken))
    backend.reads = 0
    got = read_members(backend, "a.zip", pdfs)
    assert backend.reads == 1
    assert [g for i, g in enumerate(got) if i != 2] == [
        d for i, d in enumerate(members.values()) if i != 2
    ]
    assert isinstance(got[2], FileRejected)
    assert got[2].reason == "corrupt_member"


def test_a_local_header_longer_than_the_margin_reads_on(tmp_path: Path) -> None:
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as zf:
        big = zipfile.ZipInfo("big-extra.pdf")
        big.extra = struct.pack("<HH", 0xCAFE, 3000) + b"\0" * 3000  # past the 1 KiB margin
        zf.writestr(big, PDF)
        zf.writestr("next.pdf", PDF + b"2")
    backend = FileBackend(tmp_path)
    pdfs = list_members(backend, "a.zip", LIMITS).pdfs
    assert read_members(backend, "a.zip", pdfs) == [PDF, PDF + b"2"]
    assert read_members(backend, "a.zip", pdfs[:1]) == [PDF]


def outcomes(tmp_path: Path, archive: bytes) -> dict[str, bytes | str]:
    """Each PDF's bytes, or its reason, as a process job reads the archive."""
    (tmp_path / "a.zip").write_bytes(archive)
    backend = FileBackend(tmp_path)
    pdfs = list_members(backend, "a.zip", LIMITS).pdfs
    got = read_members(backend, "a.zip", pdfs)
    return {
        m.name: g.reason if isinstance(g, FileRejected) else g
        for m, g in zip(pdfs, got, strict=True)
    }


BOBBY = PDF + b"bobby"


def test_a_local_header_pointing_its_data_at_another_member_fails_that_member(
    tmp_path: Path,
) -> None:
    """The declared spans do not overlap, but alice's local extra field runs over bobby's
    local header, so that alice's data would be bobby's: alice fails, bobby is read."""
    bobby = Part(b"bobby.pdf", BOBBY)
    padding = len(BOBBY) + 10  # alice's declared span ends before bobby's header
    decoy = struct.pack("<HH", 0xCAFE, padding - 4 + len(local_header(bobby))) + b"\0" * (
        padding - 4
    )
    same = {"crc": zlib.crc32(BOBBY), "compressed": len(BOBBY), "size": len(BOBBY)}
    alice = Part(
        b"alice.pdf", decoy, local=same | {"extra_length": len(decoy) + len(local_header(bobby))}
    )
    archive = build([alice, bobby], central={0: {"crc": zlib.crc32(BOBBY), "size": len(BOBBY)}})
    assert outcomes(tmp_path, archive) == {"alice.pdf": "corrupt_member", "bobby.pdf": BOBBY}


@pytest.mark.parametrize(
    "local",
    [
        {"name": b"bobby2.pdf"},  # zipfile refuses this one too
        {"name": b"ALICE2.PDF"},
        {"method": 8},
        {"flags": 0x1},  # encrypted, says the local header only
        {"flags": 0x800},  # the name's encoding differs
        {"flags": 0x8},  # a data descriptor the directory does not know of
        {"crc": 1},
        {"size": len(PDF) + 1},
        {"compressed": len(PDF) - 1},
    ],
    ids=lambda local: ",".join(f"{k}={v!r}" for k, v in local.items()),
)
def test_a_local_header_that_disagrees_with_the_directory_fails_that_member(
    tmp_path: Path, local: dict[str, object]
) -> None:
    parts = [Part(b"alice2.pdf", PDF, local=local), Part(b"carol.pdf", BOBBY)]
    assert outcomes(tmp_path, build(parts)) == {"alice2.pdf": "corrupt_member", "carol.pdf": BOBBY}


def test_a_data_descriptor_defers_the_local_crc_and_sizes(tmp_path: Path) -> None:
    """With flag bit 3 in both records, zeros in the local header are what writers put."""
    deferred = {"flags": 0x8, "crc": 0, "compressed": 0, "size": 0}
    parts = [Part(b"d.pdf", PDF, local=deferred), Part(b"wrong.pdf", BOBBY, local=deferred)]
    central = {0: {"flags": 0x8}, 1: {"flags": 0x8, "crc": 7}}  # the inflated CRC decides
    assert outcomes(tmp_path, build(parts, central)) == {
        "d.pdf": PDF,
        "wrong.pdf": "corrupt_member",
    }


def test_a_local_extra_field_running_past_the_archive_fails_that_member(tmp_path: Path) -> None:
    parts = [Part(b"first.pdf", PDF), Part(b"last.pdf", BOBBY, local={"extra_length": 0xFFFF})]
    assert outcomes(tmp_path, build(parts)) == {"first.pdf": PDF, "last.pdf": "corrupt_member"}


def test_members_whose_headers_overlap_refuse_the_archive(tmp_path: Path) -> None:
    """Two entries at one offset with empty data overlap in their local header."""
    parts = [Part(b"a.pdf", b""), Part(b"b.pdf", b"")]
    (tmp_path / "a.zip").write_bytes(build(parts, central={1: {"offset": 0}}))
    with pytest.raises(ArchiveRejected, match="overlap"):
        list_members(FileBackend(tmp_path), "a.zip", LIMITS)


def member(index: int, offset: int, size: int) -> Member:
    return Member(index, f"{index}.pdf", offset, size, size, zipfile.ZIP_STORED, 0)


def test_slices_are_runs_of_neighbours_bounded_in_count_and_bytes() -> None:
    pdfs = [member(i, offset=i * 10_000, size=9_000) for i in range(10)]
    runs = plan_slices(list(reversed(pdfs)), per_job=4, max_span_bytes=1_000_000)
    assert [[m.index for m in r] for r in runs] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    runs = plan_slices(pdfs, per_job=4, max_span_bytes=25_000)
    assert [[m.index for m in r] for r in runs] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    huge = [member(0, 0, 5_000_000), member(1, 5_000_100, 10)]
    assert [len(r) for r in plan_slices(huge, per_job=16, max_span_bytes=1_000_000)] == [1, 1]


def test_an_empty_listing_plans_no_job_and_one_per_job_plans_one_each() -> None:
    assert plan_slices([], per_job=8, max_span_bytes=1_000_000) == []
    pdfs = [member(i, offset=i * 100, size=50) for i in range(3)]
    assert [[m.index for m in r] for r in plan_slices(pdfs, 1, 1_000_000)] == [[0], [1], [2]]


def test_a_span_covers_its_members_and_the_gaps_between_them() -> None:
    run = [member(2, offset=1_000, size=10), member(0, offset=100, size=50)]
    assert member_span(run) == (100, run[0].end - 100)
    assert member_span(run[:1]) == (1_000, run[0].end - 1_000)
    assert run[0].end > 1_010  # the span reaches past the data's local header as well
