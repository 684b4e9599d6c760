"""What a route may ask for: the process's services, from its runtime, and checked path ids."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from pdfqueue.domain.keys import BATCH_ID_PATTERN
from pdfqueue.domain.settings import Settings
from pdfqueue.runtime.connections import Stores
from pdfqueue_api.batch_feed import BatchFeed
from pdfqueue_api.runtime import ApiRuntime
from pdfqueue_api.service import BatchService


def _runtime(request: Request) -> ApiRuntime:
    """The runtime the lifespan started (see `pdfqueue_api.app`)."""
    runtime: ApiRuntime = request.app.state.runtime
    return runtime


Runtime = Annotated[ApiRuntime, Depends(_runtime)]


def _settings(runtime: Runtime) -> Settings:
    return runtime.settings


def _stores(runtime: Runtime) -> Stores:
    return runtime.stores


def _service(runtime: Runtime) -> BatchService:
    return runtime.service


def _feed(runtime: Runtime) -> BatchFeed:
    return runtime.feed


AppSettings = Annotated[Settings, Depends(_settings)]
Connections = Annotated[Stores, Depends(_stores)]
Service = Annotated[BatchService, Depends(_service)]
Feed = Annotated[BatchFeed, Depends(_feed)]
BatchId = Annotated[str, Path(pattern=BATCH_ID_PATTERN, description="32 lowercase hex digits")]
"""A batch id path parameter: anything else is a 422 before it reaches a store."""
