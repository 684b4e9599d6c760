"""The API process's composition root: every service its routes use, built at start."""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from pdfqueue.domain.settings import Settings
from pdfqueue.domain.tenants import TokenFile
from pdfqueue.runtime.connections import API, Stores
from pdfqueue.runtime.queue_gauges import QueueGauges
from pdfqueue.runtime.store_gauges import StoreGauges
from pdfqueue.stores.redis.queue import check_durability
from pdfqueue_api.batch_feed import BatchFeed
from pdfqueue_api.oidc import OidcTokens
from pdfqueue_api.page_login import PageLogin
from pdfqueue_api.pdfbatches import PdfBatchPublisher
from pdfqueue_api.service import BatchService
from pdfqueue_api.serviceaccounts import ServiceAccountTokens

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
    token_file: TokenFile | None
    """PDFQUEUE_API_TOKENS_FILE, read again when it is replaced (None: the tokens are the
    settings')."""
    oidc: OidcTokens | None
    """Set when PDFQUEUE_OIDC_ISSUER is: the issuer's access tokens are accepted too."""
    service_accounts: ServiceAccountTokens | None
    """Set when PDFQUEUE_KUBERNETES_TOKENS is: the cluster's ServiceAccount tokens too."""
    page_login: PageLogin | None
    """Set when PDFQUEUE_OIDC_PAGE_CLIENT_ID is: the page offers a sign-in at the issuer."""
    closers: AsyncExitStack = field(repr=False)
    """What `start` opened, each closer pushed as its part opened: `close` unwinds it in
    reverse order, as a failed `start` does."""

    @classmethod
    async def start(cls, settings: Settings) -> ApiRuntime:
        """Open the stores and start the services on them. If a step fails, what was already
        opened is closed (in reverse order) before the error propagates: a lifespan that fails
        at start never runs `close`, and a pool or a Redis client left open would hold its
        connections until the process ends."""
        if settings.allow_anonymous:
            log.warning("PDFQUEUE_ALLOW_ANONYMOUS: the API accepts requests without a token")
        opened = AsyncExitStack()
        try:
            stores = await Stores.open(settings, API)
            opened.push_async_callback(stores.close)
            await _warn_unless_durable(stores)
            publisher = None
            if settings.kubernetes_namespace:
                publisher = PdfBatchPublisher(settings.kubernetes_namespace, settings.kubeconfig)
                opened.push_async_callback(publisher.close)
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
            interval_s = settings.metrics_interval_s
            queue_gauges = QueueGauges(stores.redis, settings.queue_name, interval_s)
            queue_gauges.start()
            opened.push_async_callback(queue_gauges.stop)
            store_gauges = StoreGauges(stores.redis, stores.batches, interval_s, stores.storage)
            store_gauges.start()
            opened.push_async_callback(store_gauges.stop)
            feed = BatchFeed(
                service.read,
                settings.events_interval_s,
                settings.max_event_streams,
                settings.max_event_streams_per_tenant,
            )
            feed.start()
            opened.push_async_callback(feed.stop)
        except BaseException:
            await opened.aclose()
            raise
        token_file = None
        if settings.api_tokens_file:
            token_file = TokenFile(settings.api_tokens_file, settings.api_tokens)
        oidc = OidcTokens(settings) if settings.oidc_issuer else None
        accounts = None
        if settings.kubernetes_tokens:
            accounts = ServiceAccountTokens(settings)
            opened.push_async_callback(accounts.close)
        page_login = PageLogin(settings) if settings.oidc_page_client_id else None
        return cls(
            settings,
            stores,
            *(service, feed, queue_gauges, store_gauges, publisher, token_file, oidc),
            service_accounts=accounts,
            page_login=page_login,
            closers=opened.pop_all(),
        )

    def tokens(self) -> dict[str, str]:
        """The tokens callers present: the file's as it is now, or the settings'."""
        return self.token_file.current() if self.token_file else self.settings.api_tokens

    async def close(self) -> None:
        """Stop the services, then close the stores: the reverse of `start`."""
        await self.closers.aclose()


async def _warn_unless_durable(stores: Stores) -> None:
    """Say loudly when Redis would lose queued jobs on a restart; a Redis down at start is
    only logged (/readyz says so until it is back)."""
    try:
        for problem in await check_durability(stores.redis):
            log.warning("REDIS IS NOT SAFE FOR A QUEUE: %s", problem)
    except Exception as exc:
        log.warning("redis not reachable at start: %r", exc)
