"""An OpenAI-compatible endpoint's URL from the operator's base URL."""

from __future__ import annotations

import httpx


def endpoint_url(base_url: str, name: str) -> httpx.URL:
    """`name` ("embeddings", "chat/completions") under the base URL's path, its query
    kept: an Azure deployment's `?api-version=` or a gateway's `?api-key=`. Joined as
    text, the query went into the path ("/v1?api-key=gw/embeddings") and every call
    answered 404 or 401 (an exploratory probe)."""
    base = httpx.URL(base_url)
    return base.copy_with(path=base.path.rstrip("/") + "/" + name)
