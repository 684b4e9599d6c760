"""Reading uploaded ZIPs safely: listing members with limits, reading runs of them by range."""

from __future__ import annotations

import bisect
import itertools
import posixpath
import zipfile
from dataclasses import dataclass, field, replace

from pdfqueue.domain.errors import ArchiveRejected, FileRejected
from pdfqueue.domain.names import safe_name, too_long, utf8_length
from pdfqueue.stores.storage import Backend
from pdfqueue.stores.storage.zipdir import DirectoryLimits, Entry, read_end_record, walk_entries
from pdfqueue_worker.payload import LOCAL_HEADER, Member, name_digest

_SUPPORTED_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED}
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

    The directory is walked entry by entry (`pdfqueue.stores.storage.zipdir`), refused as soon
    as it breaks a limit, so what this holds per entry is bounded by `max_members`.
    """
    listing = Listing()  # duplicate names are processed: content decides what is a duplicate
    spans: list[tuple[int, int]] = []
    declared = 0
    end = read_end_record(backend, key)
    for entry in walk_entries(backend, key, end, limits.directory):
        declared += entry.size
        if declared > limits.max_total_bytes:
            msg = (
                f"the archive declares at least {declared} uncompressed bytes;"
                f" the limit is {limits.max_total_bytes}"
                " (PDFQUEUE_MAX_TOTAL_UNCOMPRESSED_BYTES): split it into smaller ZIPs"
            )
            raise ArchiveRejected(msg)
        # its local header holds the same name: the least room the member takes
        spans.append((entry.offset, _least_end(entry)))
        _classify(listing, entry, limits)
    _reject_overlaps(spans)
    listing.pdfs = _bounded(listing.pdfs, [start for start, _ in spans], end.directory_start)
    return listing


def _least_end(entry: Entry) -> int:
    return entry.offset + LOCAL_HEADER.size + len(entry.raw_name) + entry.compressed_size


def _bounded(pdfs: list[Member], starts: list[int], directory_start: int) -> list[Member]:
    """Each member with its limit: the next member's local header, or the directory."""
    starts = sorted(starts)
    out = []
    for m in pdfs:
        at = bisect.bisect_right(starts, m.offset)
        limit = starts[at] if at < len(starts) else directory_start
        out.append(replace(m, limit=min(limit, directory_start)))
    return out


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
            entry.flag_bits,
            name_digest(entry.raw_name),
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
