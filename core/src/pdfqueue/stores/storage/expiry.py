"""Expiry of uploaded ZIPs: the S3 lifecycle rule that `pdfqueue migrate` keeps on `uploads/`."""

from __future__ import annotations

from typing import Any

"""Where the API streams each upload (`uploads/<batch_id>.zip`), below the storage prefix."""
UPLOADS_RULE_ID = "pdfqueue-expire-uploads"
"""The one lifecycle rule pdfqueue owns in a bucket; other rules are left as they are."""
NO_LIFECYCLE_CODES = frozenset({"NotImplemented", "501", "MethodNotAllowed"})
"""S3 error codes of a store without lifecycle support (versitygw's posix backend: 501)."""
ABORT_INCOMPLETE_UPLOAD_DAYS = 1
"""Multipart uploads left open (an API pod killed mid-upload) are aborted after a day."""


def uploads_rule(prefix: str, days: int) -> dict[str, Any]:
    """The lifecycle rule expiring objects under `prefix` `days` days after their creation."""
    return {
        "ID": UPLOADS_RULE_ID,
        "Status": "Enabled",
        "Filter": {"Prefix": prefix},
        "Expiration": {"Days": days},
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_INCOMPLETE_UPLOAD_DAYS},
    }


def with_uploads_rule(rules: list[dict[str, Any]], prefix: str, days: int) -> list[dict[str, Any]]:
    """The bucket's rules with pdfqueue's own replaced (PutBucketLifecycleConfiguration
    replaces the whole set, so a bucket shared with other rules keeps them)."""
    others = [r for r in rules if r.get("ID") != UPLOADS_RULE_ID]
    return [*others, uploads_rule(prefix, days)]
