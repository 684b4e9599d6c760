"""Every route's misfit parameter answers 422 with words (`detail`) and pydantic's list beside."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

BAD_ID = "nope"


def misfit(answer: httpx.Response) -> tuple[str, list[dict[str, Any]]]:
    """The 422's words and list; fails unless it has both, in that shape."""
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert isinstance(body["detail"], str), body  # was pydantic's raw list
    assert isinstance(body["errors"], list), body
    assert body["errors"], body
    return body["detail"], body["errors"]


async def test_a_bad_batch_id_is_named_in_words_on_every_route(api: httpx.AsyncClient) -> None:
    """Every operation with a batch id in its path, as /openapi.json lists them, and the page."""
    document = (await api.get("/openapi.json")).json()
    operations = [
        (method.upper(), path.replace("{batch_id}", BAD_ID))
        for path, item in document["paths"].items()
        if "{batch_id}" in path
        for method in item
    ]
    assert len(operations) >= 6, operations  # read, cancel, files, page, events, retry
    for method, url in [*operations, ("GET", f"/batches/{BAD_ID}")]:
        detail, errors = misfit(await api.request(method, url))
        assert detail == (
            f"batch id {BAD_ID!r} is not a batch id: ids are 32 lowercase hex characters"
        ), (method, url)
        assert errors[0]["loc"] == ["path", "batch_id"]
        assert errors[0]["type"] == "string_pattern_mismatch"


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("/v1/batches?limit=101", "limit must be at most 100, not '101'"),
        ("/v1/batches?limit=0", "limit must be at least 1, not '0'"),
        ("/v1/batches?limit=ten", "limit must be a whole number, not 'ten'"),
        ("/v1/batches?cursor=" + "a" * 600, "cursor must be at most 512 characters"),
        (f"/v1/batches/{'0' * 32}/files?format=xml", "format must be 'json' or 'csv', not 'xml'"),
        (f"/v1/batches/{'0' * 32}/files/page?offset=-1", "offset must be at least 0, not '-1'"),
        (f"/v1/batches/{'0' * 32}/files/page?colour=red", "unknown parameter 'colour'"),
    ],
)
async def test_a_misfit_query_parameter_is_said_in_words(
    api: httpx.AsyncClient, url: str, words: str
) -> None:
    detail, errors = misfit(await api.get(url))
    assert detail == words
    assert errors[0]["loc"][0] == "query"


async def test_a_misfit_flag_is_said_in_words(api: httpx.AsyncClient) -> None:
    batch = "0" * 32
    detail, _ = misfit(await api.post(f"/v1/batches/{batch}/retry?all_failed=maybe"))
    assert detail == "all_failed must be true or false, not 'maybe'"
    detail, _ = misfit(await api.delete(f"/v1/batches/{batch}?erase=maybe"))
    assert detail == "erase must be true or false, not 'maybe'"


async def test_the_document_declares_the_answer_it_gives(api: httpx.AsyncClient) -> None:
    schemas = (await api.get("/openapi.json")).json()["components"]["schemas"]
    declared = schemas["HTTPValidationError"]
    assert declared["properties"]["detail"]["type"] == "string"
    assert declared["properties"]["errors"]["type"] == "array"
    assert set(declared["required"]) == {"detail", "errors"}
