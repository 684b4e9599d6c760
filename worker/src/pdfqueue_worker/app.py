"""Building the arq Worker: functions, timeouts, serializer and per-process resources."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from signal import Signals
from typing import Any

from arq import Worker, func

from pdfqueue.domain.errors import DatabaseSchemaError, DatabaseUnavailable
from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue.observability.periodic import Periodic
from pdfqueue.recovery import reconcile_at_start, reconcile_if_reset, reconcile_running
from pdfqueue.runtime.connections import Stores, worker_role
from pdfqueue.runtime.queue_gauges import QueueGauges
from pdfqueue.runtime.store_gauges import StoreGauges
from pdfqueue.stores.redis.client import arq_settings
from pdfqueue.stores.redis.fair_dispatch import Dispatcher, dispatch_ticker
from pdfqueue.stores.redis.queue import check_durability, deserialize, serialize, worker_lost_redis
from pdfqueue_worker import heartbeat
from pdfqueue_worker.deliveries import Deliveries
from pdfqueue_worker.deps import Deps
from pdfqueue_worker.extractor import Extractor
from pdfqueue_worker.tasks.ingest import ingest
from pdfqueue_worker.tasks.process import process
from pdfqueue_worker.tasks.recover import recover
from pdfqueue_worker.tasks.retry import retry
from pdfqueue_worker.tasks.webhook import announce

log = logging.getLogger(__name__)
SPARE_TRIES = 3
"""arq tries beyond max_tries, in which a job only records its failure (see tasks.process)."""


async def startup(ctx: dict[str, Any]) -> None:
    settings: Settings = ctx["settings"]
    redis = ctx["redis"]
    problems = await check_durability(redis)
    for problem in problems:
        log.warning("REDIS IS NOT SAFE FOR A QUEUE: %s", problem)
    if problems and settings.redis_strict:
        msg = "refusing to start (PDFQUEUE_REDIS_STRICT): " + "; ".join(problems)
        raise RuntimeError(msg)
    stores = await Stores.open(settings, worker_role(settings), redis=redis)
    ctx["stores"] = stores
    ctx["deps"] = Deps(
        settings=settings,
        redis=redis,
        lifecycle=replace(stores.lifecycle, on_ended=partial(announce, stores)),
        pool=stores.pool,
        batches=stores.batches,
        files=stores.files,
        users=stores.users,
        storage=stores.storage,
        extractor=Extractor.from_settings(settings),
    )
    try:
        await ctx["deps"].extractor.start()
    except Exception as exc:  # as before `start`: the first job starts the pool, or fails its PDFs
        log.warning("the parsing processes did not start (%r); the first job tries again", exc)
    try:
        for warning in await ctx["deps"].users.check_table():
            log.warning("%s", warning)
    except (DatabaseSchemaError, DatabaseUnavailable) as exc:
        log.error(  # loud, but no crash loop: the host application may create it later
            "the users table cannot be used (%s): PDFs will be retried and then fail with"
            " database_schema_error until it fits the PDFQUEUE_USERS_* settings",
            exc,
        )
    metrics.register("worker")
    metrics.WORKER_MAX_JOBS.set(settings.max_jobs)
    ctx["gauges"] = QueueGauges(redis, settings.queue_name, settings.metrics_interval_s)
    ctx["gauges"].start()
    ctx["store_gauges"] = StoreGauges(
        redis, stores.batches, settings.metrics_interval_s, stores.storage
    )
    ctx["store_gauges"].start()
    ctx["heartbeat"] = heartbeat.start(redis, settings)
    if settings.dispatch_fair:
        dispatcher = Dispatcher.from_settings(redis, settings)
        ticker = dispatch_ticker(dispatcher, settings.dispatch_tick_s, settings.max_jobs)
        ctx["dispatch"] = ticker
        ctx["dispatch"].start()
    ctx["deliveries"] = Deliveries(settings, ctx["deps"])
    ctx["deliveries"].start()
    # a worker starts again after it lost Redis, which may have come back empty
    await reconcile_at_start(ctx["deps"].lifecycle)
    ctx["redis-loss"] = loss_watch(ctx["deps"])
    ctx["redis-loss"].start()


RECONCILE_TIMEOUT_S = 60.0
LOSS_CHECK_S = 5.0
"""How often a worker asks whether Redis lost its data (one SET NX)."""


FOLLOW_UP_CHECKS = 12
"""Full reconciliations after a start or a detected loss, one per LOSS_CHECK_S: a job of the
lost Redis still running somewhere can hide a batch's missing work from the first one."""


def loss_watch(deps: Deps) -> Periodic:
    """Redis may lose its data under a worker that never noticed (it reconnected at once):
    one SET NX every few seconds, and a full reconciliation on the ticks after a loss."""
    follow_ups = FOLLOW_UP_CHECKS

    async def step() -> None:
        nonlocal follow_ups
        if await reconcile_if_reset(deps.lifecycle) is not None:
            follow_ups = FOLLOW_UP_CHECKS
        elif follow_ups > 0:
            follow_ups -= 1
            await reconcile_running(deps.lifecycle)

    return Periodic("redis-loss", LOSS_CHECK_S, step, timeout_s=RECONCILE_TIMEOUT_S)


async def shutdown(ctx: dict[str, Any]) -> None:
    deliveries: Deliveries | None = ctx.pop("deliveries", None)
    if deliveries is not None:
        if ctx.get("burst"):
            await deliveries.drain()
        await deliveries.stop()
    await heartbeat.stop(ctx.pop("heartbeat", None))
    for name in ("dispatch", "redis-loss"):
        ticker: Periodic | None = ctx.pop(name, None)
        if ticker is not None:
            await ticker.stop()
    gauges: QueueGauges | None = ctx.get("gauges")
    if gauges is not None:
        await gauges.stop()
    store_gauges: StoreGauges | None = ctx.get("store_gauges")
    if store_gauges is not None:
        await store_gauges.stop()
    deps: Deps | None = ctx.get("deps")
    if deps is not None:
        deps.extractor.close()
    stores: Stores | None = ctx.get("stores")
    if stores is not None:
        await stores.close()


class ShuffledWorker(Worker):
    """arq's Worker, trying the ready jobs it read in an order of its own. Workers that read
    the same ready ids at once would all try the first one first, and every id another
    worker took already costs a WATCH round: about one per worker process per job
    (`bench.load`), the one Redis cost that grows with the number of workers."""

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        random.shuffle(job_ids)
        await super().start_jobs(job_ids)

    def handle_sig_wait_for_completion(self, signum: Signals) -> None:
        deliveries: Deliveries | None = self.ctx.get("deliveries")
        if deliveries is not None:  # no new delivery either while the PDFs finish
            deliveries.pause()
        super().handle_sig_wait_for_completion(signum)


def build_worker(settings: Settings, **overrides: Any) -> Worker:
    """The arq Worker for these settings; tests pass `burst=True` and the like."""
    settings.check_shutdown_rule()
    options: dict[str, Any] = {
        "functions": [
            func(
                ingest,
                name="ingest",
                timeout=settings.arq_timeout_s,
                max_tries=settings.max_tries + SPARE_TRIES,
            ),
            func(
                retry,
                name="retry",
                timeout=settings.arq_timeout_s,
                max_tries=settings.max_tries + SPARE_TRIES,
            ),
            func(
                recover,
                name="recover",
                timeout=settings.arq_timeout_s,
                max_tries=settings.max_tries + SPARE_TRIES,
            ),
            func(
                process,
                name="process",
                timeout=settings.arq_timeout_s,
                max_tries=settings.max_tries + SPARE_TRIES,
            ),
        ],
        # Workers wait for Redis to come back (producers, by contrast, fail fast).
        "redis_settings": arq_settings(settings),
        "queue_name": settings.queue_name,
        "max_jobs": settings.max_jobs,
        "poll_delay": settings.worker_poll_delay_s,
        "job_timeout": settings.arq_timeout_s,
        "job_completion_wait": settings.job_completion_wait_s,
        "keep_result": settings.batch_ttl_s,
        "job_serializer": serialize,
        "job_deserializer": deserialize,
        "on_startup": startup,
        "on_shutdown": shutdown,
        "ctx": {"settings": settings},
        "health_check_interval": 10,
    }
    options.update(overrides)
    options["ctx"] = {**options["ctx"], "burst": bool(options.get("burst"))}
    return ShuffledWorker(**options)


def supervise(make_worker: Callable[[], Worker], max_delay_s: float = 30.0) -> int:
    """Run arq workers until one ends normally; a lost Redis means wait and reconnect.

    arq's worker dies when Redis goes away (`worker_lost_redis` knows the forms that takes).
    Producers should fail fast, but a worker should
    ride out a Redis restart: release what this worker holds (the extraction pool, the
    database pool), back off, and start a fresh worker. With AOF on, no job is lost; jobs
    that were running run again once their in-progress keys expire.
    """
    delay = 1.0
    while True:
        worker = make_worker()
        try:
            worker.run()
        except Exception as exc:
            if not worker_lost_redis(exc):
                raise
            log.error("lost Redis (%r); reconnecting in %.0fs", exc, delay)
            worker.loop.run_until_complete(shutdown(worker.ctx))
            time.sleep(delay)
            delay = min(delay * 2, max_delay_s)
        else:
            return 0
