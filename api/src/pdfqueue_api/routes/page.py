"""The web page: upload at `/`, a batch at `/batches/{id}`, and its own static assets."""

from __future__ import annotations

import html
import json
from importlib import resources

from fastapi import APIRouter, HTTPException, status
from fastapi.responses import HTMLResponse, Response

from pdfqueue.domain.advice import ADVICE, BATCH_ADVICE
from pdfqueue_api.dependencies import BatchId, Runtime
from pdfqueue_api.runtime import ApiRuntime
from pdfqueue_api.security_headers import page_csp

ASSETS = {
    "page.css": "text/css; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
    "advice.json": "application/json",
    "batch-advice.json": "application/json",
}
"""The page's own style, script and reason table: served here, so its CSP needs nothing
inline or remote."""
_PACKAGE = resources.files("pdfqueue_api")
PAGE = _PACKAGE.joinpath("page.html").read_text()
ASSET_BYTES = {
    name: _PACKAGE.joinpath("static", name).read_bytes()
    for name in ASSETS
    if not name.endswith(".json")
}
ASSET_BYTES["advice.json"] = json.dumps(ADVICE).encode()
ASSET_BYTES["batch-advice.json"] = json.dumps(BATCH_ADVICE).encode()
router = APIRouter(include_in_schema=False)


async def _page(root: str, runtime: ApiRuntime) -> HTMLResponse:
    """The page, told whether the API runs open (no token needed: `PDFQUEUE_ALLOW_ANONYMOUS`
    without tokens), so that without a token it says where one comes from without asking
    the API first; and, with the sign-in on, where to sign in (in an attribute: the CSP
    allows no inline script), with a CSP that lets it reach the issuer's token endpoint."""
    settings = runtime.settings
    is_open = not settings.api_tokens and settings.allow_anonymous
    login = await runtime.page_login.config() if runtime.page_login else None
    login_data = html.escape(json.dumps(login.for_page()), quote=True) if login else ""
    text = PAGE.replace("%ROOT%", root).replace("%OPEN%", str(is_open).lower())
    csp = page_csp(login.token_origin if login else None)
    return HTMLResponse(
        text.replace("%LOGIN%", login_data), headers={"Content-Security-Policy": csp}
    )


@router.get("/")
async def index(runtime: Runtime) -> HTMLResponse:
    return await _page("", runtime)


@router.get("/batches/{batch_id}")
async def batch_page(batch_id: BatchId, runtime: Runtime) -> HTMLResponse:
    """The same page; its script shows the batch named in the URL (so a reload resumes)."""
    return await _page("../", runtime)


@router.get("/static/{name}")
async def asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(status.HTTP_404_NOT_FOUND)
    return Response(
        ASSET_BYTES[name], media_type=ASSETS[name], headers={"Cache-Control": "no-cache"}
    )
