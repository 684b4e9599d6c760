"""schemathesis against /openapi.json, with and without a valid token: no 5xx, all as declared."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.generation.modes import GenerationMode
from schemathesis.python import asgi

from pdfqueue.domain.settings import Settings
from tests.support.helpers import ACME

EXAMPLES = 20
"""Examples per operation, mode and token: bounded, so the whole file stays within minutes."""
KNOWN = {
    ("POST", "/v1/batches"),
    ("GET", "/v1/batches/{batch_id}"),
    ("DELETE", "/v1/batches/{batch_id}"),
    ("GET", "/v1/batches/{batch_id}/files"),
    ("GET", "/v1/batches"),
    ("GET", "/v1/batches/{batch_id}/files/page"),
    ("GET", "/v1/batches/{batch_id}/events"),
}
"""Operations that must be in the document; every operation it has is fuzzed, these and new."""
CONFIG = schemathesis.Config.from_dict(
    {
        "operations": [
            {
                # A schema cannot say "a ZIP": bytes that fit it but are not one get 422, as
                # documented (429: a tenant's quota). Any other status is a rejected valid
                # request.
                # By operation id: a path and a method would also select GET /v1/batches.
                "include-operation-id": "create_batch_v1_batches_post",
                "checks": {
                    "positive_data_acceptance": {"expected-statuses": ["202", "401", "422", "429"]}
                },
            },
            {
                # Nor can it say "a cursor this API handed out": any other one gets 400.
                "include-operation-id": "list_batches_v1_batches_get",
                # It has no path parameter to spoil: a negative case can only add unknown
                # query parameters (ignored, as by every route) or drop the Authorization
                # header, which this test then sends anyway. Both are tested elsewhere.
                "checks": {
                    "positive_data_acceptance": {"expected-statuses": ["200", "400", "401"]},
                    "negative_data_rejection": {"enabled": False},
                },
            },
        ]
    }
)
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,  # the same examples on every run: a failure reproduces
    deadline=None,
    database=None,
    # the fixture is per test on purpose (own queue, table, prefix); the app's I/O is slow
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def api_schema(settings: Settings) -> Iterator[Any]:
    """The real app (its lifespan on schemathesis' own event loop) and its OpenAPI document."""
    from pdfqueue_api.app import create_app

    app = create_app(settings)
    try:
        yield schemathesis.openapi.from_asgi("/openapi.json", app, config=CONFIG)
    finally:
        asgi.shutdown_lifespans()  # closes the app's Redis, PostgreSQL and S3 clients


def test_every_known_operation_is_in_the_document(api_schema: Any) -> None:
    assert set(operations(api_schema)) >= KNOWN


def operations(schema: Any) -> dict[tuple[str, str], Any]:
    found = (result.ok() for result in schema.get_all_operations())
    return {(op.method.upper(), op.path): op for op in found}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("mode", list(GenerationMode))
@pytest.mark.parametrize("token", [True, False], ids=["token", "no-token"])
def test_api_conforms_to_its_schema(api_schema: Any, token: bool, mode: GenerationMode) -> None:
    """Each operation in turn; a failure names it and prints a curl line reproducing it."""
    headers = ACME if token else None
    for operation in operations(api_schema).values():

        @FUZZ
        @given(case=operation.as_strategy(generation_mode=mode))
        def check(case: Any) -> None:
            case.call_and_validate(headers=headers)

        check()
