"""The central directory walk: what `zipfile` lists, read by bounded ranges, within limits."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pytest

from pdfqueue.domain.errors import DirectoryTooLarge, NotAZipArchive
from pdfqueue.stores.storage.local import FileBackend
from pdfqueue.stores.storage.zipdir import (
    READ_CHUNK_BYTES,
    DirectoryLimits,
    count_entries,
    read_end_record,
    walk_directory,
)

ROOMY = DirectoryLimits(max_entries=100_000, max_directory_bytes=64 * 1024**2)
PDF = b"%PDF-1.4\n" + b"x" * 300 + b"\n%%EOF\n"


class CountingBackend(FileBackend):
    """Records the length of every ranged read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[int] = []

    def read_range(self, key: str, start: int, length: int) -> bytes:
        self.reads.append(length)
        return super().read_range(key, start, length)


def as_zipfile_lists(path: Path) -> list[tuple[object, ...]]:
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    return [
        (
            i.filename,
            i.flag_bits,
            i.compress_type,
            i.CRC,
            i.compress_size,
            i.file_size,
            i.header_offset,
        )
        for i in infos
    ]


def as_walked(backend: FileBackend, key: str) -> list[tuple[object, ...]]:
    return [
        (e.name, e.flag_bits, e.method, e.crc, e.compressed_size, e.size, e.offset)
        for e in walk_directory(backend, key, ROOMY)
    ]


def write(path: Path, members: dict[str, bytes], comment: bytes = b"") -> None:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr(zipfile.ZipInfo("caf\xe9.pdf"), PDF)  # cp437 name, no UTF-8 flag
        with zf.open(zipfile.ZipInfo("z64.pdf"), "w", force_zip64=True) as fh:
            fh.write(PDF)
        zf.comment = comment


def test_lists_what_zipfile_lists(tmp_path: Path) -> None:
    write(tmp_path / "a.zip", {"dir/": b"", "dir/a.pdf": PDF, "é/ü.pdf": PDF, "n.txt": b"hi"})
    assert as_walked(FileBackend(tmp_path), "a.zip") == as_zipfile_lists(tmp_path / "a.zip")


def test_an_archive_comment_and_a_self_extractor_stub(tmp_path: Path) -> None:
    write(tmp_path / "c.zip", {"a.pdf": PDF}, comment=b"made by hand " * 1000)
    stub = b"MZ" + b"\0" * 4094
    (tmp_path / "s.zip").write_bytes(stub + (tmp_path / "c.zip").read_bytes())
    backend = FileBackend(tmp_path)
    for key in ("c.zip", "s.zip"):
        assert as_walked(backend, key) == as_zipfile_lists(tmp_path / key)
    assert read_end_record(backend, "s.zip").shift == len(stub)


def test_more_entries_than_a_16_bit_count_uses_the_zip64_end_record(tmp_path: Path) -> None:
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(70_000):
            zf.writestr(f"{i}.txt", b"")
    backend = CountingBackend(tmp_path)
    end = read_end_record(backend, "many.zip")
    assert end.entries == 70_000
    assert count_entries(backend, "many.zip", ROOMY) == 70_000
    assert max(backend.reads) <= READ_CHUNK_BYTES  # never the whole directory at once
    chunks = -(-end.directory_size // READ_CHUNK_BYTES)
    assert len(backend.reads) == 2 + chunks  # the tail (once per call), then the directory
    with pytest.raises(DirectoryTooLarge, match="declares 70000 members; the limit is 69999"):
        count_entries(backend, "many.zip", DirectoryLimits(69_999, 64 * 1024**2))
    small = DirectoryLimits(100_000, end.directory_size - 1)
    with pytest.raises(DirectoryTooLarge, match=f"is {end.directory_size} bytes"):
        count_entries(backend, "many.zip", small)


def end_record_at(data: bytes) -> int:
    return data.rfind(b"PK\x05\x06")


def test_a_lying_entry_count_does_not_let_the_walk_pass_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "lie.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(10):
            zf.writestr(f"{i}.pdf", PDF)
    data = bytearray(path.read_bytes())
    struct.pack_into("<HH", data, end_record_at(data) + 8, 1, 1)  # "one entry"
    path.write_bytes(bytes(data))
    backend = FileBackend(tmp_path)
    walked = []
    with pytest.raises(DirectoryTooLarge, match="more than 5 members"):
        walked.extend(walk_directory(backend, "lie.zip", DirectoryLimits(5, 1024**2)))
    assert len(walked) == 5
    assert count_entries(backend, "lie.zip", ROOMY) == 10  # as zipfile: the walk decides


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("not a zip", "not a zip file"),
        ("an entry runs past the directory", "Truncated central directory"),
        ("directory offset past it", "outside the archive"),
        ("bad entry signature", "Bad magic number"),
        ("two disks", "span multiple disks"),
        ("zip64 record missing", "ZIP64 end record"),
        ("corrupt extra field", "Corrupt extra field"),
    ],
)
def test_damaged_end_records_and_directories(tmp_path: Path, damage: str, message: str) -> None:
    path = tmp_path / "a.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("a.pdf", PDF)
        odd = zipfile.ZipInfo("b.pdf")
        odd.extra = struct.pack("<HH", 0xCAFE, 4) + b"1234"
        zf.writestr(odd, PDF)
    data = bytearray(path.read_bytes())
    end = end_record_at(data)
    offset = struct.unpack_from("<L", data, end + 16)[0]
    if damage == "not a zip":
        data = bytearray(b"%PDF-1.4 nothing to see" * 100)
    elif damage == "an entry runs past the directory":
        last = data.rfind(b"PK\x01\x02")
        struct.pack_into("<H", data, last + 32, 100)  # a comment that is not there
    elif damage == "directory offset past it":
        struct.pack_into("<L", data, end + 16, offset + 1)
    elif damage == "bad entry signature":
        data[offset : offset + 4] = b"PK\x09\x09"
    elif damage == "two disks":
        data = bytearray(_with_zip64_end(bytes(data), disks=2))
    elif damage == "zip64 record missing":
        data = bytearray(_with_zip64_end(bytes(data), disks=1, broken=True))
    elif damage == "corrupt extra field":
        field = data.find(b"\xfe\xca\x04\x00", offset)
        data[field + 2] = 40  # the field says 40 bytes; the entry's extra holds 4
    path.write_bytes(bytes(data))
    with pytest.raises(NotAZipArchive, match=message):
        count_entries(FileBackend(tmp_path), "a.zip", ROOMY)


def _with_zip64_end(data: bytes, *, disks: int, broken: bool = False) -> bytes:
    """Insert a ZIP64 end record and locator before the end record (as large archives have)."""
    end = end_record_at(data)
    _, _, _, _, entries, size, offset, _ = struct.unpack_from("<4s4H2LH", data, end)
    record = struct.pack(
        "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, size, offset
    )
    if broken:
        record = b"\0" * len(record)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, end, disks)
    return data[:end] + record + locator + data[end:]
