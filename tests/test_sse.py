"""Batch events over SSE: in order, resumable, tenant-checked, ending at the terminal state."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from pdfqueue_dev.processes import wait_until_async
from tests.support.helpers import ACME, GLOBEX, MakeCorpus, RunWorker

ORDER = ["PENDING", "PROCESSING", "COMPLETED"]


async def read_events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """(id, data) of every `status` event until the server ends the stream."""
    events: list[tuple[str, dict[str, Any]]] = []
    fields: dict[str, str] = {}
    async for line in response.aiter_lines():
        if line == "":
            if fields.get("event") == "status":
                events.append((fields["id"], json.loads(fields["data"])))
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value
    return events


@pytest.mark.timeout(180)
# One PDF per job and a quick feed: the batch moves in many small steps, so the stream shows
# progress between start and end even when the worker is fast.
@pytest.mark.settings(pdfs_per_job=1, events_interval_s=0.05)
async def test_events_follow_the_batch_to_its_end_and_resume(
    served: str, served_app: FastAPI, make_corpus: MakeCorpus, run_worker: RunWorker
) -> None:
    corpus, path = await make_corpus(120, seed=8)
    async with httpx.AsyncClient(base_url=served, headers=ACME, timeout=60) as http:
        created = await http.post(
            "/v1/batches", content=path.read_bytes(), headers={"Content-Type": "application/zip"}
        )
        batch_id = created.json()["batch_id"]
        url = f"/v1/batches/{batch_id}/events"

        assert (await http.get(url, headers=GLOBEX)).status_code == 404
        assert (await http.get("/v1/batches/" + "0" * 32 + "/events")).status_code == 404

        async with http.stream("GET", url) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            worker = asyncio.create_task(run_worker())
            events = await read_events(response)  # returns when the server ends the stream
            await worker

        statuses = [data["status"] for _, data in events]
        assert statuses[0] == "PENDING"
        assert statuses[-1] == "COMPLETED"
        assert statuses == sorted(statuses, key=ORDER.index)  # never goes back
        processed = [data["processed"] for _, data in events]
        assert processed == sorted(processed)
        assert len(set(processed)) > 2  # progress in between, not just start and end
        assert [i for i, _ in events] == [f"{d['status']}:{d['processed']}" for _, d in events]
        assert len({i for i, _ in events}) == len(events)  # no state sent twice
        final = events[-1][1]
        assert {k: final[k] for k in corpus.counts()} == corpus.counts()
        assert final == (await http.get(f"/v1/batches/{batch_id}")).json()

        # Resumed after a state before the end: only what is new, then the end.
        resumed_from = events[1][0]
        async with http.stream("GET", url, headers={"Last-Event-ID": resumed_from}) as response:
            again = await read_events(response)
        assert again == [events[-1]]
        # Resumed after the end: nothing more (204 tells EventSource not to reconnect).
        done = await http.get(url, headers={"Last-Event-ID": events[-1][0]})
        assert done.status_code == 204
        assert done.content == b""

    assert served_app.state.runtime.feed.watchers == {}  # every stream unsubscribed


async def test_event_streams_share_one_read_per_batch_per_tick(
    served: str, served_app: FastAPI, make_corpus: MakeCorpus
) -> None:
    _, path = await make_corpus(3, seed=9)
    feed = served_app.state.runtime.feed
    reads: list[str] = []
    real_read = feed.read

    async def counting(batch_id: str) -> Any:
        reads.append(batch_id)
        return await real_read(batch_id)

    feed.read = counting
    async with httpx.AsyncClient(base_url=served, headers=ACME, timeout=30) as http:
        created = await http.post(
            "/v1/batches", content=path.read_bytes(), headers={"Content-Type": "application/zip"}
        )
        batch_id = created.json()["batch_id"]
        async with contextlib.AsyncExitStack() as streams:
            for _ in range(20):
                opened = await streams.enter_async_context(
                    http.stream("GET", f"/v1/batches/{batch_id}/events")
                )
                assert opened.status_code == 200
            await wait_until_async(lambda: feed.streams == 20, "20 streams", 60, interval_s=0.02)
            reads.clear()
            await feed.tick()
            assert reads == [batch_id]  # 20 streams, one read
    await wait_until_async(  # closed streams unsubscribe
        lambda: not feed.watchers, "no watcher left", 60, interval_s=0.02
    )


@pytest.mark.settings(max_event_streams=2)
async def test_streams_over_the_limit_get_503(
    served: str, served_app: FastAPI, make_corpus: MakeCorpus
) -> None:
    _, path = await make_corpus(2, seed=10)
    async with httpx.AsyncClient(base_url=served, headers=ACME, timeout=30) as http:
        created = await http.post(
            "/v1/batches", content=path.read_bytes(), headers={"Content-Type": "application/zip"}
        )
        url = f"/v1/batches/{created.json()['batch_id']}/events"
        async with contextlib.AsyncExitStack() as streams:
            for _ in range(2):
                opened = await streams.enter_async_context(http.stream("GET", url))
                assert opened.status_code == 200
            await wait_until_async(
                lambda: served_app.state.runtime.feed.streams == 2, "2 streams", 60, interval_s=0.02
            )
            refused = await http.get(url)
            assert refused.status_code == 503
            assert refused.json() == {
                "detail": "events is unavailable: too many open event streams"
            }


@pytest.mark.timeout(120)
# A slow feed: the erasure (cancel, then gone) happens between two reads, so the stream's
# next read finds the batch gone rather than cancelled.
@pytest.mark.settings(events_interval_s=1.0)
async def test_the_stream_of_an_erased_batch_ends(
    served: str, served_app: FastAPI, make_corpus: MakeCorpus
) -> None:
    """An erased batch reads as gone: its stream used to wait for a state that never came,
    holding its slot, and the API's shutdown waited on it for ever."""
    _, path = await make_corpus(4, seed=9)
    async with httpx.AsyncClient(base_url=served, headers=ACME, timeout=60) as http:
        created = await http.post(
            "/v1/batches", content=path.read_bytes(), headers={"Content-Type": "application/zip"}
        )
        batch_id = created.json()["batch_id"]
        async with http.stream("GET", f"/v1/batches/{batch_id}/events") as response:
            lines = response.aiter_lines()
            while await anext(lines) != "event: status":  # the first state is there
                pass
            erased = await http.delete(f"/v1/batches/{batch_id}", params={"erase": "true"})
            assert erased.status_code == 202, erased.text
            rest = [line async for line in lines]  # returns when the server ends the stream
        assert "event: gone" in rest
        assert "event: status" not in rest[rest.index("event: gone") :]
    assert served_app.state.runtime.feed.watchers == {}
