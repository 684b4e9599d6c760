"""The worker's heartbeat: its running-job count under its pod name, gone when it stops."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from pdfqueue.domain import keys
from pdfqueue.domain.settings import Settings
from pdfqueue.observability import metrics
from pdfqueue_worker import heartbeat


async def test_heartbeat_publishes_running_jobs_with_a_ttl_and_clears_on_stop(
    redis: Redis, settings: Settings
) -> None:
    pod = f"worker-{settings.queue_name.rsplit(':', 1)[1]}"
    assert heartbeat.start(redis, settings.model_copy(update={"pod_name": None})) is None
    beating = heartbeat.start(
        redis, settings.model_copy(update={"pod_name": pod, "worker_heartbeat_s": 0.05})
    )
    assert beating is not None
    key = keys.worker_heartbeat(pod)
    running = metrics.JOBS_IN_PROGRESS.labels("process")
    with running.track_inprogress(), running.track_inprogress():
        await asyncio.sleep(0.2)
        assert await redis.get(key) == b"2"
        assert 0 < await redis.pttl(key) <= 150
    await asyncio.sleep(0.2)
    assert await redis.get(key) == b"0"
    await heartbeat.stop(beating)
    assert await redis.exists(key) == 0
