"""An OpenAI-compatible endpoint's URL from the operator's base URL."""

from __future__ import annotations

import httpx


def endpoint_url(base_url: str, name: str) -> httpx.URL:
    """`name` ("embeddings", "chat/completions") under the base URL's path, its query
    kept: an Azure deployment's `?api-version=` or a gateway's `?api-key=`. Joined as
    text, the query went into the path ("/v1?api-key=gw/embeddings") and every call
    answered 404 or 401 (an exploratory probe). Joined on the raw path, so an encoded
    "%3F" or "%2F" in it stays as written."""
    base = httpx.URL(base_url)
    path, _, query = base.raw_path.partition(b"?")
    raw = path.rstrip(b"/") + b"/" + name.encode() + (b"?" + query if query else b"")
    return base.copy_with(raw_path=raw)
