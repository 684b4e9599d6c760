"""kopf handlers, kept thin: parse the object, call the reconciler, write the status.

No handler here needs a finalizer (no on.delete, timer or daemon), so deleting a PdfBatch is
never blocked, even while the operator is down: a deletion is seen as a DELETED event, or,
if the operator missed it, by the status loop finding the object gone.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from asyncpg import PostgresError
from redis.exceptions import RedisError

from pdfqueue.errors import ObjectNotFound, SourceOutsideBucket, TransientError
from pdfqueue.pdfbatch import GROUP, PLURAL, VERSION
from pdfqueue.settings import Settings
from pdfqueue_operator.autoscaler import Key, WorkerDeployment
from pdfqueue_operator.model import PdfBatchObject
from pdfqueue_operator.runtime import Operator
from pdfqueue_operator.status import progress, rejected

log = logging.getLogger(__name__)
MAX_RETRY_DELAY_S = 300.0


@kopf.on.startup()
async def startup(
    settings: kopf.OperatorSettings,
    memo: kopf.Memo,
    worker_deployments: kopf.Index[Key, WorkerDeployment],
    hpa_targets: kopf.Index[Key, str],
    **_: Any,
) -> None:
    config = Settings()
    # Only worker Deployments are watched at all (server-side), not every Deployment.
    settings.watching.label_selectors["apps", "v1", "deployments"] = config.operator_worker_selector
    settings.posting.reporting_component = "pdfqueue-operator"
    settings.posting.level = logging.WARNING  # failures become Events; successes only log lines
    memo.operator = await Operator.start(config, worker_deployments, hpa_targets)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    if "operator" in memo:
        await memo.operator.close()


@kopf.on.probe(id="loops")
def loops(memo: kopf.Memo, **_: Any) -> dict[str, float]:
    """Liveness: fails when the autoscaler or status loop has stopped completing."""
    operator: Operator = memo.operator
    return operator.health()


@kopf.index("apps", "v1", "deployments")
def worker_deployments(body: kopf.Body, **_: Any) -> dict[Key, WorkerDeployment]:
    deployment = WorkerDeployment.from_body(body)
    return {deployment.key: deployment}


@kopf.index("autoscaling", "v2", "horizontalpodautoscalers")
def hpa_targets(spec: kopf.Spec, namespace: str, name: str, **_: Any) -> dict[Key, str] | None:
    target = spec.get("scaleTargetRef") or {}
    if target.get("kind") != "Deployment":
        return None
    return {(namespace, target["name"]): name}


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
async def reconcile(
    body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **_: Any
) -> None:
    """Queue the batch (idempotent: resume after a restart repeats nothing) and show it."""
    operator: Operator = memo.operator
    obj = PdfBatchObject.from_body(body)
    delay = min(operator.settings.operator_status_interval_s * 2**retry, MAX_RETRY_DELAY_S)
    try:
        summary = await operator.reconciler.ensure(obj)
    except SourceOutsideBucket as exc:
        patch.status.update(
            rejected("SourceOutsideBucket", str(exc), obj.generation, obj.conditions, final=True)
        )
        raise kopf.PermanentError(str(exc)) from exc
    except ObjectNotFound as exc:
        message = f"{obj.spec.source} does not exist (yet); looking again in {delay:g}s"
        patch.status.update(
            rejected("SourceNotFound", message, obj.generation, obj.conditions, final=False)
        )
        raise kopf.TemporaryError(message, delay=delay) from exc
    except (TransientError, RedisError, PostgresError, OSError) as exc:
        raise kopf.TemporaryError(f"a dependency failed: {exc!r}", delay=delay) from exc
    patch.status.update(progress(summary, obj.generation, obj.conditions))


@kopf.on.event(GROUP, VERSION, PLURAL, when=lambda type, **_: type == "DELETED")
async def deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Cancel the batch of a deleted PdfBatch: queued PDFs are dropped, running ones finish."""
    operator: Operator = memo.operator
    await operator.reconciler.forget(PdfBatchObject.from_body(body).batch_id)
