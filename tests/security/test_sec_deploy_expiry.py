"""Uploads expire: `pdfqueue migrate` keeps a lifecycle rule on uploads/, or says loudly it can't."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.provision import provision
from pdfqueue.stores.storage.expiry import UPLOADS_RULE_ID, uploads_rule, with_uploads_rule


def _lifecycle_code(bucket: str) -> str:
    client = boto3.client(
        "s3", endpoint_url=os.environ["PDFQUEUE_S3_ENDPOINT_URL"], region_name="us-east-1"
    )
    with pytest.raises(ClientError) as caught:
        client.get_bucket_lifecycle_configuration(Bucket=bucket)
    return str(caught.value.response["Error"]["Code"])


async def test_versitygw_has_no_lifecycle_so_migrate_warns_and_still_provisions(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """What the real versitygw (posix backend) does: NotImplemented. Migrate goes on, warns."""
    with caplog.at_level(logging.WARNING, logger="pdfqueue.runtime.provision"):
        done = await provision(settings)
    assert done.uploads_expiry == "unsupported"
    assert done.storage == f"{settings.storage_url}/"
    (record,) = [r for r in caplog.records if r.name == "pdfqueue.runtime.provision"]
    assert record.levelno == logging.WARNING
    assert "has no lifecycle rules: uploads/ is never cleaned" in record.getMessage()
    assert "older than 7 days" in record.getMessage()
    assert _lifecycle_code("pdfqueue") == "NotImplemented"  # nothing half-written


@pytest.mark.settings(uploads_expire_days=0)
async def test_no_expiry_asked_means_no_rule_and_no_warning(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="pdfqueue.runtime.provision"):
        done = await provision(settings)
    assert done.uploads_expiry == "off"
    assert [r for r in caplog.records if r.name == "pdfqueue.runtime.provision"] == []


async def test_a_folder_store_warns_that_uploads_stay(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = Settings(
        **{**settings.model_dump(), "storage_url": f"file://{tmp_path}/store", "api_tokens": {}}
    )
    with caplog.at_level(logging.WARNING, logger="pdfqueue.runtime.provision"):
        done = await provision(folder)
    assert done.uploads_expiry == "unsupported"
    assert "has no lifecycle rules" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]


def test_negative_days_are_refused() -> None:
    with pytest.raises(ValueError, match="uploads_expire_days"):
        Settings(uploads_expire_days=-1)


def test_the_rule_expires_only_uploads_below_the_prefix_and_keeps_other_rules() -> None:
    theirs = {"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}}
    stale = uploads_rule("tenant-a/uploads/", 30)
    rules = with_uploads_rule([theirs, stale], "tenant-a/uploads/", 7)
    assert rules == [
        theirs,
        {
            "ID": UPLOADS_RULE_ID,
            "Status": "Enabled",
            "Filter": {"Prefix": "tenant-a/uploads/"},
            "Expiration": {"Days": 7},
            "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
        },
    ]
