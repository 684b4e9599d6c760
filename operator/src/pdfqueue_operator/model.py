"""PdfBatch objects as the handlers receive them, parsed into typed values."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pdfqueue.domain.pdfbatch import BATCH_ID_ANNOTATION, DEFAULT_TENANT


class PdfBatchSpec(BaseModel):
    model_config = ConfigDict(frozen=True)

    source: str
    tenant: str = DEFAULT_TENANT


class ObjectRef(BaseModel):
    """Which object mirrors a batch: kept in Redis while the batch runs."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    uid: str

    def dumps(self) -> str:
        return self.model_dump_json()

    @classmethod
    def loads(cls, raw: bytes | str) -> ObjectRef:
        return cls.model_validate(json.loads(raw))


class PdfBatchObject(BaseModel):
    model_config = ConfigDict(frozen=True)

    ref: ObjectRef
    generation: int | None = None
    annotations: dict[str, str] = Field(default_factory=dict)
    spec: PdfBatchSpec
    conditions: list[dict[str, Any]] = Field(default_factory=list)
    phase: str | None = None
    """`.status.phase` as the operator last wrote it (None before its first status)."""
    shown_id: str | None = None
    """`.status.batchId`: the batch whose progress the operator wrote into this object."""

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PdfBatchObject:
        meta = body["metadata"]
        return cls(
            ref=ObjectRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"]),
            generation=meta.get("generation"),
            annotations=dict(meta.get("annotations") or {}),
            spec=PdfBatchSpec.model_validate(dict(body.get("spec") or {})),
            conditions=list((body.get("status") or {}).get("conditions") or []),
            phase=(body.get("status") or {}).get("phase"),
            shown_id=(body.get("status") or {}).get("batchId"),
        )

    @property
    def adopted_id(self) -> str | None:
        """The API's batch-id annotation, unchecked (None when absent): a claim, not a fact."""
        return self.annotations.get(BATCH_ID_ANNOTATION)

    @property
    def own_id(self) -> str:
        """The id of the batch this object creates itself: its uid as 32 hex digits.

        A uid is a UUID, so the id has the API's own shape, and a manifest deleted and
        applied again is a new object and so a new batch.
        """
        return self.ref.uid.replace("-", "").lower()

    @property
    def batch_id(self) -> str:
        """The batch this object names: the annotation if present, else its own id."""
        adopted = self.adopted_id
        return adopted if adopted is not None else self.own_id
