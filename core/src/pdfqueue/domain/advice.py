"""Every skip or failure reason in plain words, with what to do: read by the page and the CLI."""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from collections.abc import Iterable

ADVICE: dict[str, tuple[str, str]] = {
    "no_email": (
        "No email address found in the PDF.",
        "Check the file is the right document; an address only in an image may be unreadable.",
    ),
    "no_text": (
        "The PDF has no readable text.",
        "It is probably a scan: run OCR on it, or ask for a text PDF.",
    ),
    "needs_ocr": (
        "The PDF is a scan (no usable text layer) and OCR is not available or turned off.",
        "Install Tesseract in the worker (tesseract-ocr, tesseract-ocr-eng), or set"
        " PDFQUEUE_OCR_MAX_PAGES above 0, then retry; or ask for a text PDF.",
    ),
    "ambiguous": (
        "The PDF names two different users where its owner's address belongs.",
        "Nothing was linked: check whose résumé it is, and link it by hand or remove the"
        " other address, then upload it again.",
    ),
    "no_user": (
        "The email found matches no user.",
        "Create the user first, or correct the email in the document, then upload it again.",
    ),
    "already_linked": (
        "The user already has another PDF.",
        "Nothing was replaced: remove the user's current PDF first if this one should win.",
    ),
    "duplicate": (
        "The same PDF was already linked to this user.",
        "Nothing to do.",
    ),
    "encrypted": (
        "The PDF is password-protected.",
        "Ask for an unprotected copy.",
    ),
    "encrypted_member": (
        "The ZIP entry is encrypted.",
        "Zip the files again without a password.",
    ),
    "unreadable": (
        "The PDF is damaged and could not be read.",
        "Open it in a PDF viewer and save or print it again as PDF, or ask for a new copy.",
    ),
    "corrupt_member": (
        "The ZIP entry is damaged.",
        "Create the ZIP again and upload it.",
    ),
    "not_a_pdf": (
        "The file is not a PDF.",
        "Convert it to PDF, or leave it out of the ZIP.",
    ),
    "too_large": (
        "The PDF is larger than allowed.",
        "Compress it or split it, or ask the administrator to raise PDFQUEUE_MAX_PDF_BYTES.",
    ),
    "compression_ratio": (
        "The entry unpacks to far more than its size, like a zip bomb.",
        "Zip the files again with ordinary compression.",
    ),
    "unsupported_compression": (
        "The ZIP entry uses a compression method that is not supported.",
        "Zip the files again with standard (deflate) compression.",
    ),
    "unsafe_name": (
        "The entry's name is unsafe (an absolute path, '..', or control characters).",
        "Rename the file and zip it again.",
    ),
    "name_too_long": (
        "The entry's name is longer than pdfqueue keeps (1024 bytes of UTF-8); the report"
        " shows it cut.",
        "Give the file a shorter name and zip it again.",
    ),
    "invalid_data": (
        "The database refused what this file carried (a value out of range or not allowed).",
        "Nothing was linked for it: check the file and its user's row, then upload it again;"
        " if it persists, tell the administrator.",
    ),
    "database_rejected": (
        "The database refused the statement for this file: retrying will not help.",
        "Tell the administrator (the worker's log names the SQLSTATE).",
    ),
    "storage_rejected": (
        "The object store refused to store or read this file (for example: too large).",
        "Nothing was linked for it: tell the administrator (the worker's log says why).",
    ),
    "redis_rejected": (
        "Redis refused a command for this file: retrying will not help.",
        "Tell the administrator (the worker's log names the reply).",
    ),
    "parser_crashed": (
        "Reading the PDF crashed or used too much memory.",
        "Save or print it again as PDF, then upload it again.",
    ),
    "timeout": (
        "Reading the PDF took too long.",
        "Upload it again; if it fails again, save it again as a simpler PDF.",
    ),
    "worker_lost": (
        "The worker handling the file stopped.",
        "Upload the file again (or retry the batch's failed files).",
    ),
    "upload_gone": (
        "The batch was retried after its uploaded ZIP expired.",
        "Upload the ZIP again.",
    ),
}
"""reason -> (what happened, what to do). A reason not listed is an internal one: retry."""

FALLBACK = (
    "The file could not be processed ({reason}).",
    "Try again later; if it persists, tell the administrator.",
)


def advice(reason: str | None) -> tuple[str, str] | None:
    """(what happened, what to do) for a reason; None for a file without one."""
    return _words(ADVICE, FALLBACK, reason)


def _words(
    table: dict[str, tuple[str, str]], fallback: tuple[str, str], reason: str | None
) -> tuple[str, str] | None:
    if not reason:
        return None
    found = table.get(reason)
    if found is not None:
        return found
    return fallback[0].format(reason=reason), fallback[1]


NO_PDF_MEMBERS = "no_pdf_members"
"""The batch reason of a ZIP in which no member is a PDF by name (empty ones included)."""

BATCH_ADVICE: dict[str, tuple[str, str]] = {
    NO_PDF_MEMBERS: (
        "The ZIP holds no PDF: it is empty, or no file in it has a name ending in .pdf.",
        "Put the PDFs in the ZIP (each name ending in .pdf) and upload it again; the batch's"
        " report lists the files the ZIP held.",
    ),
    "not_a_zip": (
        "The upload is not a ZIP archive pdfqueue can read.",
        "Create the ZIP again (a standard .zip, not .rar or .7z) and upload it.",
    ),
    "too_many_members": (
        "The ZIP holds more entries, or a bigger central directory, than allowed.",
        "Split it into smaller ZIPs (see the Limits page), or ask the administrator to raise"
        " PDFQUEUE_MAX_MEMBERS or PDFQUEUE_MAX_DIRECTORY_BYTES.",
    ),
    "archive_rejected": (
        "The ZIP as a whole breaks a safety limit: it unpacks to more than allowed, or its"
        " members overlap (a zip bomb's trick).",
        "Split it into smaller ZIPs, or create it again with an ordinary tool; the error says"
        " which limit (see the Limits page).",
    ),
    "upload_gone": (
        "The batch's ZIP is no longer in storage.",
        "Upload the ZIP again.",
    ),
    "ingest_gave_up": (
        "Listing the ZIP kept failing (a store was down) until its tries ran out.",
        "Upload it again once the service is healthy; if it persists, tell the administrator.",
    ),
}
"""batch reason -> (what happened, what to do), for a batch that ended FAILED as a whole."""

BATCH_FALLBACK = (
    "The batch could not be started ({reason}).",
    "Tell the administrator (the worker's log says why), then upload the ZIP again.",
)


def batch_advice(reason: str | None) -> tuple[str, str] | None:
    """(what happened, what to do) for a failed batch's reason; None without one."""
    return _words(BATCH_ADVICE, BATCH_FALLBACK, reason)


_KIND = re.compile(r"[a-z0-9]{1,8}")


def no_pdfs_found(names: Iterable[str]) -> str:
    """The error of a batch whose ZIP holds no PDF: how many files, and of which kinds.

    Member names are personal data (`Ann Smith CV.docx`): the message, which the batch row,
    the PdfBatch status and webhooks carry, names only counts and short extensions; the
    batch's report lists the names themselves.
    """
    kinds = Counter(_kind(n) for n in names)
    files = sum(kinds.values())
    if not files:
        return "the ZIP holds no files (it is empty, or holds folders only): there is no PDF"
    found = ", ".join(
        f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    noun = "file" if files == 1 else "files"
    return (
        f"the ZIP holds {files} {noun} and none is a PDF ({found});"
        " the batch's report lists them by name"
    )


def _kind(name: str) -> str:
    """`.docx` for `CV Ann.DOCX`; a name without a short plain extension is `other`."""
    base = posixpath.basename(name)
    stem, dot, ext = base.rpartition(".")
    ext = ext.lower()
    if not (dot and stem):
        return "without extension"
    return f".{ext}" if _KIND.fullmatch(ext) else "other"
