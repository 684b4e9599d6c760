"""kopf handlers, kept thin: parse the object, call the reconciler, say why it was refused.

They write `.status` only for an object refused: a batch's progress has one writer, the
operator's status loop (`BatchReconciler.mirror`). kopf patches what a handler returns without
a resourceVersion, after the handler is done: a summary read before a retry or the batch's
last file would overwrite what the loop wrote since, and the loop, which writes only what
changed, would not write it again.

kopf posts what its handlers raise as Events, readable by anyone who can read the namespace:
so what they raise is generic (a reason, never an exception's text or a dependency's URL),
and the details go to the operator's own log.

No handler here needs a finalizer (no on.delete, timer or daemon), so deleting a PdfBatch is
never blocked, even while the operator is down: a deletion is seen as a DELETED event, or,
if the operator missed it, by the status loop finding the object gone.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from pdfqueue.domain.errors import ObjectNotFound, PermanentError
from pdfqueue.domain.pdfbatch import GROUP, PLURAL, VERSION
from pdfqueue.domain.settings import Settings
from pdfqueue.observability.logging import setup_logging
from pdfqueue_operator.kube import always
from pdfqueue_operator.model import ObjectRef, PdfBatchObject
from pdfqueue_operator.runtime import Operator
from pdfqueue_operator.status import rejected
from pdfqueue_operator.worker_scaler import Key, WorkerDeployment

log = logging.getLogger(__name__)
MAX_RETRY_DELAY_S = 300.0


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **indices: Any) -> None:
    # kopf passes each index by its handler's name, as a keyword its ActivityFn type leaves open.
    worker_deployments: kopf.Index[Key, WorkerDeployment] = indices["worker_deployments"]
    hpa_targets: kopf.Index[Key, str] = indices["hpa_targets"]
    shown_batches: kopf.Index[str, ObjectRef] = indices["shown_batches"]
    setup_logging()  # again for `kopf run -m`, whose own plain format is not redacted
    config = Settings()
    # Only worker Deployments are watched at all (server-side), not every Deployment.
    settings.watching.label_selectors["apps", "v1", "deployments"] = config.operator_worker_selector
    settings.posting.reporting_component = "pdfqueue-operator"
    # Handler failures become Events (kopf posts log lines only when asked to), successes only
    # log lines. Their text is what the handlers raise: generic, see the module's docstring.
    settings.posting.loggers = True
    settings.posting.level = logging.WARNING
    # kopf runs only in the leader (pdfqueue_operator.process), whose memo says how to tell that
    # its term still holds; without one (kopf run -m), this process acts alone.
    memo.operator = await Operator.start(
        config,
        worker_deployments,
        hpa_targets,
        leading=memo.get("leading", always),
        identity=memo.get("identity"),
        stores=memo.pop("stores", None),
        client=memo.pop("kube", None),
        shown=shown_batches,
    )


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    if "operator" in memo:
        await memo.operator.close()


@kopf.index("apps", "v1", "deployments")
def worker_deployments(body: kopf.Body, **_: Any) -> dict[Key, WorkerDeployment]:
    deployment = WorkerDeployment.from_body(body)
    return {deployment.key: deployment}


@kopf.index("autoscaling", "v2", "horizontalpodautoscalers")
def hpa_targets(
    spec: kopf.Spec, namespace: str | None, name: str, **_: Any
) -> dict[Key, str] | None:
    target = spec.get("scaleTargetRef") or {}
    if namespace is None or target.get("kind") != "Deployment":  # HPAs are namespaced
        return None
    return {(namespace, target["name"]): name}


@kopf.index(GROUP, VERSION, PLURAL)
def shown_batches(body: kopf.Body, **_: Any) -> dict[str, ObjectRef] | None:
    """Batch id -> the object whose status shows it: whose status to trim once it is removed."""
    shown = (body.get("status") or {}).get("batchId")
    meta = body["metadata"]
    ref = ObjectRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])
    return {shown: ref} if isinstance(shown, str) and shown else None


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
async def reconcile(
    body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, retry: int, **_: Any
) -> None:
    """Queue the batch (idempotent: resume after a restart repeats nothing) and track it."""
    operator: Operator = memo.operator
    obj = PdfBatchObject.from_body(body)
    delay = min(operator.settings.operator_status_interval_s * 2**retry, MAX_RETRY_DELAY_S)
    try:
        await operator.reconciler.ensure(obj)
    except ObjectNotFound as exc:
        message = f"{obj.spec.source} does not exist (yet); looking again in {delay:g}s"
        patch.status.update(
            rejected("SourceNotFound", message, obj.generation, obj.conditions, final=False)
        )
        raise kopf.TemporaryError("the source does not exist (yet)", delay=delay) from exc
    except PermanentError as exc:  # refused: the status says why, in the object's own terms
        reason = type(exc).__name__
        patch.status.update(rejected(reason, str(exc), obj.generation, obj.conditions, final=True))
        raise kopf.PermanentError(f"refused: {reason}") from exc
    except Exception as exc:
        log.warning(
            "PdfBatch %s/%s: reconciling failed, retrying in %gs",
            obj.ref.namespace,
            obj.ref.name,
            delay,
            exc_info=True,
        )
        raise kopf.TemporaryError("a dependency is unavailable; retrying", delay=delay) from exc


@kopf.on.event(GROUP, VERSION, PLURAL, when=lambda type, **_: type == "DELETED")
async def deleted(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Cancel the batch of a deleted PdfBatch: queued PDFs are dropped, running ones finish."""
    operator: Operator = memo.operator
    obj = PdfBatchObject.from_body(body)
    await operator.reconciler.forget(obj.batch_id, obj.ref.uid)
