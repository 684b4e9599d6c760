"""Every Redis key, object key and arq job id: one place, so producers and consumers agree."""

from __future__ import annotations

import hashlib
import re

from pdfqueue.domain.errors import InvalidBatchId

PREFIX = "pdfqueue"
BATCH_ID_PATTERN = "^[0-9a-f]{32}$"
"""Every batch id: a UUID as 32 lowercase hex digits, so it can never act as a glob or a path."""
_BATCH_ID = re.compile(r"[0-9a-f]{32}")


def is_batch_id(value: object) -> bool:
    return isinstance(value, str) and _BATCH_ID.fullmatch(value) is not None


def checked(batch_id: str) -> str:
    """`batch_id` itself, or InvalidBatchId: no key is ever built from anything else."""
    if not is_batch_id(batch_id):
        raise InvalidBatchId(str(batch_id))
    return batch_id


def batch(batch_id: str) -> str:
    """Hash with the batch's status and counters (TTL, refreshed while it runs)."""
    return f"{PREFIX}:batch:{checked(batch_id)}"


def outcomes(batch_id: str) -> str:
    """Hash of file index -> outcome: the once-only guard behind every counter."""
    return f"{PREFIX}:batch:{checked(batch_id)}:outcomes"


UPLOADS_PREFIX = "uploads/"
"""Where uploaded archives are stored (the bucket's lifecycle rule expires them)."""


def upload(batch_id: str) -> str:
    """The object key of a batch's uploaded ZIP."""
    return f"{UPLOADS_PREFIX}{checked(batch_id)}.zip"


_PLAIN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")


def linked_pdf(user_id: int | str, sha256: str) -> str:
    """The content-addressed object key of a PDF linked to a user."""
    return f"{linked_prefix(user_id)}{sha256}.pdf"


def linked_prefix(user_id: int | str) -> str:
    """Where the PDFs linked to a user are: `pdfs/<id>/` for an integer, a UUID or a plain
    text id; any other text id (slashes, dots first, spaces, over 128 characters: the host's
    ids are not pdfqueue's to trust as a path) by its SHA-256, after a `~` that no plain id
    holds, so that no id names another's folder."""
    text = str(int(user_id)) if isinstance(user_id, int) else user_id
    if not _PLAIN_ID.fullmatch(text):
        text = "~" + hashlib.sha256(text.encode()).hexdigest()
    return f"pdfs/{text}/"


def quota(tenant: str, name: str) -> str:
    """A tenant's quota counter: `uploads`, `retries`, `inflight` or `bytes:<UTC date>`."""
    return f"{PREFIX}:quota:{tenant}:{name}"


def ingest_job(batch_id: str) -> str:
    return f"ingest:{checked(batch_id)}"


def process_job(batch_id: str, index: int) -> str:
    return f"{process_job_prefix(batch_id)}{int(index)}"


def retry_process_job(batch_id: str, round_: int, index: int) -> str:
    """A `process` job of retry round `round_`: a new id, as arq keeps the first run's result."""
    return f"{process_job_prefix(batch_id)}r{int(round_)}:{int(index)}"


def webhook_job(batch_id: str, round_: int) -> str:
    """The completion webhook of the batch's round `round_` (0 before any retry): one each."""
    return f"webhook:{checked(batch_id)}:{int(round_)}"


def delivery_job(batch_id: str, round_: int) -> str:
    """The delivery of the batch's round `round_` on the delivery queue (an id of its own: arq
    keeps a job's key and result under its id whatever the queue, and `webhook_job` ids may
    still be in the PDF queue from before deliveries had one)."""
    return f"delivery:{checked(batch_id)}:{int(round_)}"


def retry_job(batch_id: str, round_: int) -> str:
    """The job that fans out retry round `round_` of the batch (one per round)."""
    return f"retry:{checked(batch_id)}:{int(round_)}"


def recover_job(batch_id: str, token: int) -> str:
    """The job that re-submits a batch's work lost from Redis (one per rebuild, see
    `pdfqueue.recovery`): it lists the ZIP again and queues the files without an outcome."""
    return f"recover:{checked(batch_id)}:{int(token)}"


def recovering(batch_id: str) -> str:
    """A short lock: one reconciler at a time rebuilds a batch (its value is the holder's token)."""
    return f"{PREFIX}:recovering:{checked(batch_id)}"


def redis_epoch(queue_name: str) -> str:
    """A key written once per queue and never expiring: when it is gone, Redis lost its data
    (a new empty volume, a failover without the last writes) and the queue's running batches
    are rebuilt."""
    return f"{PREFIX}:epoch:{queue_name}"


ERASED = f"{PREFIX}:erased"
"""Sorted set of batch id -> until when (ms) its erasure refuses its jobs: a tombstone whose
key names no batch, so that an erased batch leaves no key with its id."""


def batch_job_ids(batch_id: str, rounds: int) -> list[str]:
    """The arq job ids the batch has once per batch or per round, in `rounds` retry rounds:
    computed, never searched for."""
    ids = [ingest_job(batch_id)]
    for round_ in range(rounds + 1):
        ids += [webhook_job(batch_id, round_), delivery_job(batch_id, round_)]
        ids += [retry_job(batch_id, round_)] if round_ else []
    return ids


def file_job_ids(batch_id: str, indexes: list[int], rounds: int) -> list[str]:
    """The `process` job ids the batch can have used for files at `indexes` (a run's job is
    named by its first file's index), in the first run and `rounds` retry rounds."""
    ids = [process_job(batch_id, i) for i in indexes]
    for round_ in range(1, rounds + 1):
        ids += [retry_process_job(batch_id, round_, i) for i in indexes]
    return ids


def fair_batch_keys(queue_name: str, batch_id: str) -> list[str]:
    """The fair-dispatch keys of one batch (`pdfqueue.stores.redis.fair_dispatch`'s Lua scripts)."""
    at = f"{fair_prefix(queue_name)}b:{checked(batch_id)}:"
    return [f"{at}pending", f"{at}meta", f"{at}inflight"]


BATCH_WORK_JOBS = ("ingest", "process", "retry", "recover")
"""The jobs that move a batch forward (a webhook does not): while one of them is queued or
running, the batch's work is in Redis."""


def batch_of_job(job_id: str) -> str | None:
    """The batch a job of BATCH_WORK_JOBS works for (None for any other job)."""
    function, _, rest = job_id.partition(":")
    batch_id = rest.split(":", 1)[0]
    return batch_id if function in BATCH_WORK_JOBS and is_batch_id(batch_id) else None


def process_job_prefix(batch_id: str) -> str:
    """What every `process` job id of the batch starts with (compared as text, never a glob)."""
    return f"process:{checked(batch_id)}:"


def last_error(job_id: str) -> str:
    """Why a job's latest try failed: its reason if it runs out of tries."""
    return f"{PREFIX}:last-error:{job_id}"


def delivery_queue(queue_name: str) -> str:
    """The arq queue of the webhook deliveries: served by slots of their own, never by the
    PDF jobs' (a callback that never answers must not hold a slot another tenant's PDFs need)."""
    return f"{queue_name}:deliveries"


def fair_prefix(queue_name: str) -> str:
    """What every fair-dispatch key of the queue starts with (pending work, windows, deficits)."""
    return f"{PREFIX}:fair:{queue_name}:"


def worker_heartbeat(pod_name: str) -> str:
    """A worker pod's running-job count (TTL): the operator scales in idle pods first."""
    return f"{PREFIX}:worker:{pod_name}:running"


def operator_batches(queue_name: str) -> str:
    """Hash of batch id -> the PdfBatch object mirroring it, until the batch is terminal.

    Kept in Redis, not in the operator's memory, so a PdfBatch deleted while the operator
    was down is still noticed (and its batch cancelled) when it comes back.
    """
    return f"{PREFIX}:operator:{queue_name}:pdfbatches"


def operator_finished(queue_name: str, batch_id: str) -> str:
    """The PdfBatch that mirrored a batch now terminal (TTL): a retry tracks it again."""
    return f"{PREFIX}:operator:{queue_name}:finished:{checked(batch_id)}"
