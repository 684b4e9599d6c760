"""Every skip or failure reason in plain words, with what to do: read by the page and the CLI."""

from __future__ import annotations

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
        "The ZIP entry is damaged, or its two descriptions in the ZIP disagree.",
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
    if not reason:
        return None
    found = ADVICE.get(reason)
    if found is not None:
        return found
    return FALLBACK[0].format(reason=reason), FALLBACK[1]
