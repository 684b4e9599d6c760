"""The API process's composition root: every service its routes use, built at start."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.connections import API, Stores
from pdfqueue.runtime.gauges import QueueGauges
from pdfqueue.runtime.progress import StoreGauges
from pdfqueue.stores.queue import check_durability
from pdfqueue_api.batch_feed import BatchFeed
from pdfqueue_api.kube import PdfBatchPublisher
from pdfqueue_api.service import BatchService

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApiRuntime:
    """The API role's stores and what is built on them; the lifespan starts and closes it,
    routes ask for its parts through `pdfqueue_api.dependencies`."""

    settings: Settings
    stores: Stores
    service: BatchService
    feed: BatchFeed
    queue_gauges: QueueGauges
    store_gauges: StoreGauges
    publisher: PdfBatchPublisher | None
    """Set in Kubernetes mode: the API also creates a PdfBatch per upload."""

    @classmethod
    async def start(cls, settings: Settings) -> ApiRuntime:
        if settings.allow_anonymous:
            log.warning("PDFQUEUE_ALLOW_ANONYMOUS: the API accepts requests without a token")
        stores = await Stores.open(settings, API)
        try:
            for problem in await check_durability(stores.redis):
                log.warning("REDIS IS NOT SAFE FOR A QUEUE: %s", problem)
        except Exception as exc:  # Redis down at start: /readyz says so until it is back
            log.warning("redis not reachable at start: %r", exc)
        publisher = None
        if settings.kubernetes_namespace:
            publisher = PdfBatchPublisher(settings.kubernetes_namespace, settings.kubeconfig)
        service = BatchService(
            settings,
            stores.redis,
            stores.lifecycle,
            stores.pool,
            stores.batches,
            stores.files,
            stores.storage,
            publisher,
        )
        queue_gauges = QueueGauges(stores.redis, settings.queue_name, settings.metrics_interval_s)
        queue_gauges.start()
        store_gauges = StoreGauges(stores.redis, stores.batches, settings.metrics_interval_s)
        store_gauges.start()
        feed = BatchFeed(
            service.read,
            settings.events_interval_s,
            settings.max_event_streams,
            settings.max_event_streams_per_tenant,
        )
        feed.start()
        return cls(settings, stores, service, feed, queue_gauges, store_gauges, publisher)

    async def close(self) -> None:
        await self.feed.stop()
        await self.queue_gauges.stop()
        await self.store_gauges.stop()
        if self.publisher is not None:
            await self.publisher.close()
        await self.stores.close()
