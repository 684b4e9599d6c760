"""A request that does not fit its route's parameters, said in words beside pydantic's list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.requests import Request

SHOWN_INPUT = 40
"""Characters of a refused value repeated in the words (the list has it whole)."""
NAMES = {"batch_id": "batch id"}
"""Parameters whose name reads better in words."""

ANSWER_SCHEMA: dict[str, Any] = {
    "title": "HTTPValidationError",
    "description": "The request does not fit the route's parameters: `detail` says how in"
    " words, `errors` lists each misfit as pydantic reports it.",
    "type": "object",
    "properties": {
        "detail": {"title": "Detail", "type": "string"},
        "errors": {
            "title": "Errors",
            "type": "array",
            "items": {"$ref": "#/components/schemas/ValidationError"},
        },
    },
    "required": ["detail", "errors"],
}
"""How /openapi.json declares every route's 422 for a misfit parameter (FastAPI's own
declaration has `detail` as the list)."""


async def invalid_request(_request: Request, exc: Exception) -> JSONResponse:
    """422: what is wrong in words (`detail`), and the machine-readable list (`errors`)."""
    assert isinstance(exc, RequestValidationError)  # registered for that type only
    found = exc.errors()
    return JSONResponse(
        {"detail": in_words(found), "errors": jsonable_encoder(found)}, status_code=422
    )


def in_words(errors: Sequence[Any]) -> str:
    """Each misfit as a sentence, joined; the same words whatever the route."""
    return "; ".join(dict.fromkeys(_sentence(e) for e in errors)) or "the request is malformed"


WORDS = {
    "less_than_equal": "{name} must be at most {le}, not {value}",
    "less_than": "{name} must be below {lt}, not {value}",
    "greater_than_equal": "{name} must be at least {ge}, not {value}",
    "greater_than": "{name} must be above {gt}, not {value}",
    "int_parsing": "{name} must be a whole number, not {value}",
    "bool_parsing": "{name} must be true or false, not {value}",
    "string_too_long": "{name} must be at most {max_length} characters",
    "literal_error": "{name} must be {expected}, not {value}",
    "enum": "{name} must be {expected}, not {value}",
    "string_pattern_mismatch": "{name} {value} does not match {pattern}",
    "missing": "{name} is required",
    "extra_forbidden": "unknown parameter {field!r}",
    "batch_id": "batch id {value} is not a batch id: ids are 32 lowercase hex characters",
}
"""Each kind of pydantic error in words; fields of its `ctx` fill the blanks."""


def _sentence(error: dict[str, Any]) -> str:
    loc = [part for part in error.get("loc", ()) if isinstance(part, str)]
    field = loc[-1] if loc else "the request"
    kind = error.get("type", "")
    if field == "batch_id" and kind == "string_pattern_mismatch":
        kind = "batch_id"  # the one parameter a person copies, and so mistypes
    blanks = {
        **(error.get("ctx") or {}),
        "field": field,
        "name": NAMES.get(field, field),
        "value": _shown(error.get("input")),
    }
    template = WORDS.get(kind, "{name}: {msg}")
    try:
        return template.format_map({**blanks, "msg": error.get("msg", "invalid")})
    except (KeyError, IndexError, ValueError):  # a ctx without the blank: pydantic's words
        return f"{blanks['name']}: {error.get('msg', 'invalid')}"


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else str(value)
    return repr(text[:SHOWN_INPUT] + ("…" if len(text) > SHOWN_INPUT else ""))
