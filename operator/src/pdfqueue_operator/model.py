"""PdfBatch objects as the handlers receive them, parsed into typed values."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pdfqueue.pdfbatch import DEFAULT_TENANT, batch_id_for


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

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> PdfBatchObject:
        meta = body["metadata"]
        return cls(
            ref=ObjectRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"]),
            generation=meta.get("generation"),
            annotations=dict(meta.get("annotations") or {}),
            spec=PdfBatchSpec.model_validate(dict(body.get("spec") or {})),
            conditions=list((body.get("status") or {}).get("conditions") or []),
        )

    @property
    def batch_id(self) -> str:
        return batch_id_for(self.ref.uid, self.annotations)
