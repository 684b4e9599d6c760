"""The operator process: campaign for the Lease, run kopf while leading, release it on the way out.

Not kopf's peering: it pauses every operator of the same priority at once, and pauses only
kopf's own watch handlers, never the loops this operator runs beside them (nolar/kopf#247:
run one active pod). Instead kopf runs only inside a term (controller-runtime's model):

- A standby runs no kopf at all: nothing watches, scales or patches. It serves `/healthz`
  and `pdfqueue_operator_leader 0`, and looks at the Lease every retry period. It has opened
  its stores and built its Kubernetes client already: the S3 client and the kubernetes API
  classes (thousands of pydantic models) block the event loop for seconds as they are built,
  which would starve a new leader's first renewals.
- Once it holds the Lease it starts kopf (its startup handler builds the stores and starts
  the leader tasks) and renews the Lease until the term ends.
- SIGTERM (a pod deleted, a rollout): kopf stops its handlers and loops first, then the
  Lease is released (holder emptied), so a standby takes over on its next look.
- A renewal not accepted before the renew deadline ends the term: the leader tasks are
  cancelled at once, then kopf, which has half the stop budget to end; the process exits
  (status 1) in any case before a standby may take over; the kubelet restarts it as a standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Collection
from typing import Any

import kopf

from pdfqueue.domain.errors import ConfigurationError
from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue.runtime.connections import OPERATOR, Stores
from pdfqueue.stores import kubeapi
from pdfqueue_operator import kube
from pdfqueue_operator.election import Elector, identity_for
from pdfqueue_operator.health import HealthServer
from pdfqueue_operator.lease import LeaseTiming

log = logging.getLogger(__name__)
EXIT_TERM_LOST = 1


class Process:
    """One operator process: its memo (what kopf's handlers see) and what `/healthz` says."""

    def __init__(
        self,
        settings: Settings,
        elector: Elector | None,
        identity: str,
        stores: Stores,
        client: kube.Kube,
    ) -> None:
        self.settings = settings
        self.elector = elector
        self.identity = identity
        self.memo = kopf.Memo()
        self.memo.leading = elector.leading if elector else kube.always
        self.memo.identity = identity
        self.memo.stores = stores  # both taken by the startup handler
        self.memo.kube = client

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.leading()

    def report(self) -> dict[str, Any]:
        body: dict[str, Any] = {"role": "leader" if self.leading else "standby"}
        body["identity"] = self.identity
        if self.elector is not None:
            body["holder"] = self.elector.holder
            stale_s = 10 * self.elector.timing.retry_period_s + 30
            age = time.monotonic() - self.elector.last_look
            if age > stale_s:
                raise RuntimeError(f"the election loop has not looked at the Lease for {age:.0f}s")
        operator = self.memo.get("operator")
        if self.leading and operator is not None:
            body |= operator.health()
        return body

    def halt(self) -> None:
        operator = self.memo.get("operator")
        if operator is not None:
            operator.halt()


async def run(settings: Settings, *, namespaces: Collection[str], standalone: bool) -> int:
    metrics.register("election")
    metrics.serve(settings.metrics_port)
    identity = identity_for(settings.pod_name)
    namespace = settings.operator_lease_namespace or kubeapi.own_namespace()
    if not standalone and not namespace:
        raise ConfigurationError(
            "PDFQUEUE_OPERATOR_LEASE_NAMESPACE is unset and this is not a pod: set it, or run"
            " `pdfqueue operator --standalone` (one replica only)"
        )
    api = await kubeapi.connect(settings.kubeconfig)
    elector = None
    if not standalone:
        assert namespace is not None
        elector = Elector(
            api,
            namespace=namespace,
            name=settings.operator_lease_name,
            identity=identity,
            timing=LeaseTiming.of(settings),
        )
    stores = await Stores.open(settings, OPERATOR)
    leading = elector.leading if elector else kube.always
    client = kube.Kube(await kubeapi.connect(settings.kubeconfig), leading, identity)
    process = Process(settings, elector, identity, stores, client)
    metrics.operator_leading(elector is None)
    health = HealthServer(settings.operator_health_port, process.report)
    await health.start()
    try:
        if elector is None:
            await _kopf(process, namespaces)
            return 0
        return await _elected(process, elector, namespaces)
    finally:
        await health.stop()
        await api.close()
        if process.memo.get("stores") is not None:  # else the leader's operator closed them
            await stores.close()
            await client.close()


async def _elected(process: Process, elector: Elector, namespaces: Collection[str]) -> int:
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopped.set)
    campaign = asyncio.create_task(elector.campaign(), name="lease-campaign")
    stop_wait = asyncio.create_task(stopped.wait())
    await asyncio.wait({campaign, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    if not campaign.done():  # stopped while standing by: nothing to hand over
        campaign.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await campaign
        return 0
    if stopped.is_set():  # won and told to stop at once: hand it straight on
        stop_wait.cancel()
        await elector.release()
        return 0
    term = asyncio.create_task(elector.hold(), name="lease-renewal")
    operator = asyncio.create_task(_kopf(process, namespaces), name="kopf")
    # kopf handles SIGTERM itself once it has started; one that arrives before is ours.
    await asyncio.wait({term, operator, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    stop_wait.cancel()
    if term.done():
        return await _stop_acting(process, elector, operator, lost=True)
    if not operator.done():  # our own SIGTERM, before kopf took the signals over
        await _stop_acting(process, elector, operator, lost=False)
    # kopf stopped (a signal, or a crash): it has stopped acting, its loops included.
    term.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await term
    await elector.release()
    if not operator.cancelled() and operator.exception() is not None:
        log.error("the operator stopped", exc_info=operator.exception())
        return 1
    return 0


async def _stop_acting(
    process: Process, elector: Elector, operator: asyncio.Task[None], *, lost: bool
) -> int:
    """Cancel the leader tasks at once, then kopf; when the term is lost, exit in any case
    within half the stop budget (a standby may take over when it runs out)."""
    process.halt()  # the leader tasks first: they are what writes most
    operator.cancel()
    grace_s = elector.timing.stop_budget_s / 2
    done, _ = await asyncio.wait({operator}, timeout=grace_s)
    if not done and lost:
        log.error("kopf did not stop within %gs of losing the Lease: exiting now", grace_s)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(EXIT_TERM_LOST)
    if not done:
        await asyncio.wait({operator})
    return EXIT_TERM_LOST


async def _kopf(process: Process, namespaces: Collection[str]) -> None:
    """kopf's operator with our memo; no kopf peering (the Lease decides) nor kopf liveness.

    No stop flag: given one, kopf leaves its waiter task pending when a signal stops it, then
    waits 5 s for that "hung" task, and the Lease would be released that much later. It is
    stopped by cancelling it instead.
    """
    await kopf.operator(
        clusterwide=not namespaces,
        namespaces=namespaces,
        standalone=True,
        memo=process.memo,
    )
