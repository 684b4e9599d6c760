"""Server-side encryption of what pdfqueue writes to S3: what each write asks for, and the
check that the store did it.

S3 encrypts an object with its own keys (SSE-S3, `AES256`) or a KMS key (SSE-KMS,
`aws:kms`) when the write carries `x-amz-server-side-encryption` (and the key id); it says
so in the answer to a PUT, and in a HEAD of any object. A store that does not implement it
(some S3-compatible servers ignore the header) would keep the object in the clear while
the settings say otherwise, so each write's answer is checked (a multipart upload's, by a
HEAD once it is complete: not every store repeats the header there), and `probe` writes
one object at start for each key in use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pdfqueue.domain.errors import EncryptionRefused
from pdfqueue.domain.settings import Settings

SSE_HEADER = "x-amz-server-side-encryption"
KMS_KEY_HEADER = "x-amz-server-side-encryption-aws-kms-key-id"
ALGORITHMS = {"none": None, "sse-s3": "AES256", "sse-kms": "aws:kms"}
"""PDFQUEUE_S3_SSE's values as S3 names them in its header."""


@dataclass(frozen=True)
class Encryption:
    """The encryption every object written gets: one algorithm, a KMS key per tenant."""

    algorithm: str | None = None
    """`AES256`, `aws:kms`, or None: the write asks for nothing (the bucket's default)."""
    key_id: str | None = None
    """The installation's KMS key (None with `aws:kms`: the bucket's default KMS key)."""
    tenant_key_ids: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Settings) -> Encryption:
        return cls(
            ALGORITHMS[settings.s3_sse],
            settings.s3_sse_kms_key_id,
            dict(settings.s3_sse_tenant_kms_key_ids),
        )

    @property
    def by_tenant(self) -> bool:
        """Whether the key depends on the tenant (a write must name it)."""
        return bool(self.tenant_key_ids)

    def key_for(self, tenant: str | None) -> str | None:
        if tenant is not None and tenant in self.tenant_key_ids:
            return self.tenant_key_ids[tenant]
        return self.key_id

    def headers(self, tenant: str | None) -> dict[str, str]:
        """The request headers of a write (signed with the rest: they are x-amz- ones)."""
        if self.algorithm is None:
            return {}
        headers = {SSE_HEADER: self.algorithm}
        if self.algorithm == "aws:kms" and (key := self.key_for(tenant)):
            headers[KMS_KEY_HEADER] = key
        return headers

    def request_args(self, tenant: str | None) -> dict[str, str]:
        """The same as boto3's PutObject and CreateMultipartUpload parameters."""
        if self.algorithm is None:
            return {}
        args = {"ServerSideEncryption": self.algorithm}
        if self.algorithm == "aws:kms" and (key := self.key_for(tenant)):
            args["SSEKMSKeyId"] = key
        return args

    def require(self, answered: str | None, key: str) -> None:
        """Raise EncryptionRefused unless the store says `key` is encrypted as asked (a KMS
        key's id is not compared: S3 answers with the key's ARN whatever name was given)."""
        if self.algorithm is not None and answered != self.algorithm:
            said = f"it answered {answered!r}" if answered else "it did not say so"
            raise EncryptionRefused(
                self.algorithm, f"the store wrote {key!r} but {said}; it may ignore the header"
            )

    def probes(self) -> list[str | None]:
        """The tenants whose key a probe write tries: None for the installation's, then
        each tenant with a key of its own."""
        return [None, *sorted(self.tenant_key_ids)] if self.algorithm else []
