"""Reading uploaded ZIPs safely: listing members with limits, reading runs of them by range."""

from __future__ import annotations

import io
import itertools
import posixpath
import zipfile
from dataclasses import asdict, dataclass, field
from typing import Any

from pdfqueue.domain.errors import ArchiveRejected, FileRejected
from pdfqueue.domain.names import safe_name, too_long, utf8_length
from pdfqueue.stores.storage import Backend
from pdfqueue.stores.zipdir import DirectoryLimits, Entry, walk_directory
from pdfqueue_worker.payload import LOCAL_HEADER, LOCAL_SIGNATURE, data_start

_SUPPORTED_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}
_NAME_MARGIN = 1024  # local header name + extra field; read again if it is larger
_DETAIL_NAME_BYTES = 120


class MemberRejected(FileRejected):
    """One member breaks a rule of the archive limits."""


@dataclass(frozen=True)
class Limits:
    max_members: int
    max_member_bytes: int
    max_total_bytes: int
    max_ratio: float
    max_directory_bytes: int

    @property
    def directory(self) -> DirectoryLimits:
        return DirectoryLimits(self.max_members, self.max_directory_bytes)


@dataclass(frozen=True, slots=True)
class Member:
    """Where one member's bytes are inside the archive: enough to read it with one ranged GET."""

    index: int
    name: str
    offset: int
    compressed_size: int
    size: int
    method: int
    crc: int

    @property
    def end(self) -> int:
        """Where a read of this member may stop: its data plus room for the local header."""
        return self.offset + LOCAL_HEADER.size + _NAME_MARGIN + self.compressed_size

    def to_job(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Listing:
    pdfs: list[Member] = field(default_factory=list)
    rejected: list[tuple[int, str, MemberRejected]] = field(default_factory=list)
    """PDF members that fail at once: (index, name, why)."""
    ignored: list[tuple[int, str, str]] = field(default_factory=list)
    """Members that are not PDFs by name: (index, name, reason); reported, never counted."""

    @property
    def total_files(self) -> int:
        return len(self.pdfs) + len(self.rejected)


def list_members(backend: Backend, key: str, limits: Limits) -> Listing:
    """Classify every member of the stored ZIP from its central directory (blocking).

    The directory is walked entry by entry (`pdfqueue.stores.zipdir`), refused as soon as it breaks
    a limit, so what this holds per entry is bounded by `max_members`.
    """
    listing = Listing()  # duplicate names are processed: content decides what is a duplicate
    spans: list[tuple[int, int]] = []
    declared = 0
    for entry in walk_directory(backend, key, limits.directory):
        declared += entry.size
        if declared > limits.max_total_bytes:
            msg = (
                f"the archive declares at least {declared} uncompressed bytes;"
                f" the limit is {limits.max_total_bytes}"
                " (PDFQUEUE_MAX_TOTAL_UNCOMPRESSED_BYTES): split it into smaller ZIPs"
            )
            raise ArchiveRejected(msg)
        if not entry.is_dir:
            spans.append((entry.offset, entry.offset + entry.compressed_size))
        _classify(listing, entry, limits)
    _reject_overlaps(spans)
    return listing


def _classify(listing: Listing, entry: Entry, limits: Limits) -> None:
    """File the entry as a PDF, a rejected PDF or an ignored member. Whatever the ZIP names,
    what is kept is `safe_name`'s rendering: bounded, and text every store takes."""
    name, shown = entry.name, safe_name(entry.name)
    if entry.is_dir or _is_metadata(name):
        return
    if not name.lower().endswith(".pdf"):
        listing.ignored.append((entry.index, shown, "not_a_pdf"))
        return
    try:
        _check_member(entry, limits)
    except MemberRejected as exc:
        listing.rejected.append((entry.index, shown, exc))
        return
    listing.pdfs.append(
        Member(
            entry.index,
            shown,
            entry.offset,
            entry.compressed_size,
            entry.size,
            entry.method,
            entry.crc,
        )
    )


def _is_metadata(name: str) -> bool:
    base = posixpath.basename(name)
    return name.startswith("__MACOSX/") or base.startswith("._") or base == ".DS_Store"


def _check_member(entry: Entry, limits: Limits) -> None:
    name = safe_name(entry.name, _DETAIL_NAME_BYTES)  # for the messages: they reach logs
    if too_long(entry.name):
        length = utf8_length(entry.name)
        raise MemberRejected("name_too_long", f"a member name is {length} bytes: {name!r}")
    if not entry.name_valid:
        raise MemberRejected("unsafe_name", f"member name {name!r} is not the UTF-8 it claims")
    raw = entry.name
    if raw.startswith("/") or ".." in raw.split("/") or "\\" in raw or ":" in raw:
        raise MemberRejected("unsafe_name", f"member name {name!r} is absolute or climbs out")
    if entry.flag_bits & 0x1:
        raise MemberRejected("encrypted_member", f"{name!r} is encrypted inside the ZIP")
    if entry.method not in _SUPPORTED_METHODS:
        raise MemberRejected("unsupported_compression", f"{name!r} uses method {entry.method}")
    if entry.size > limits.max_member_bytes:
        raise MemberRejected("too_large", f"{name!r} is {entry.size} bytes uncompressed")
    ratio = entry.size / max(entry.compressed_size, 1)
    if ratio > limits.max_ratio:
        raise MemberRejected("compression_ratio", f"{name!r} expands {ratio:.0f}x: a zip bomb?")


def _reject_overlaps(spans: list[tuple[int, int]]) -> None:
    """Overlapping members are the trick behind non-recursive zip bombs: refuse the archive."""
    spans.sort()
    for (_, end), (start, _) in itertools.pairwise(spans):
        if start < end:
            msg = "members overlap inside the archive (an overlapping-entry zip bomb?)"
            raise ArchiveRejected(msg)


def plan_slices(pdfs: list[Member], per_job: int, max_span_bytes: int) -> list[list[Member]]:
    """Runs of consecutive members for one job each, so one ranged GET reads them all.

    A run ends at `per_job` members, or before its byte span (data and whatever lies between)
    would pass `max_span_bytes`; a member bigger than that is a run of its own.
    """
    runs: list[list[Member]] = []
    for m in sorted(pdfs, key=lambda m: m.offset):
        run = runs[-1] if runs else None
        if run and len(run) < per_job and m.end - run[0].offset <= max_span_bytes:
            run.append(m)
        else:
            runs.append([m])
    return runs


def member_span(members: list[Member]) -> tuple[int, int]:
    """(offset, length) of the one ranged read that covers `members`."""
    start = min(m.offset for m in members)
    return start, max(m.end for m in members) - start


def decode_members(
    backend: Backend, key: str, members: list[Member], data: bytes
) -> list[bytes | MemberRejected]:
    """Each member's bytes, or why it cannot be read, from `data` read at `member_span`."""
    start, length = member_span(members)
    span = _Span(backend, key, start, data, at_end=len(data) < length)
    out: list[bytes | MemberRejected] = []
    for m in members:
        try:
            out.append(_decode(span, m))
        except MemberRejected as exc:
            out.append(exc)
    return out


@dataclass(frozen=True)
class _Span:
    """Bytes read from `offset` on; a read running past them fetches the rest by range,
    unless the object already ended there (a truncated archive reads short, as a file would)."""

    backend: Backend
    key: str
    offset: int
    data: bytes
    at_end: bool

    def read(self, offset: int, length: int) -> bytes:
        lo = offset - self.offset
        have = self.data[lo : lo + length]
        if len(have) < length and not self.at_end:
            have += self.backend.read_range(self.key, offset + len(have), length - len(have))
        return have


def _decode(span: _Span, m: Member) -> bytes:
    """The uncompressed bytes of one member, checked against its size and CRC."""
    header = span.read(m.offset, LOCAL_HEADER.size)
    if len(header) < LOCAL_HEADER.size or header[:4] != LOCAL_SIGNATURE:
        raise MemberRejected("corrupt_member", f"{m.name!r}: no local header at its offset")
    start = m.offset + data_start(header)
    info = zipfile.ZipInfo(m.name)
    info.compress_type, info.compress_size, info.file_size, info.CRC = (
        m.method,
        m.compressed_size,
        m.size,
        m.crc,
    )
    raw = io.BytesIO(span.read(start, m.compressed_size))
    try:
        with zipfile.ZipExtFile(raw, "r", info) as fh:
            data = fh.read(m.size + 1)
    except Exception as exc:  # BadZipFile (CRC), zlib.error, EOFError: a damaged member
        raise MemberRejected("corrupt_member", f"{m.name!r}: {exc}") from exc
    if len(data) != m.size:
        raise MemberRejected("corrupt_member", f"{m.name!r}: size differs from the directory")
    return data
