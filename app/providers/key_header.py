"""The header an upstream API key travels in: `Authorization: Bearer <key>` by default
(OpenAI and most compatible servers), or the key as is in a header of another name, as
Azure OpenAI's classic deployment endpoints take it (`api-key: <key>`)."""

from __future__ import annotations

import re

BEARER = "Authorization"

# RFC 9110's token: the characters a header's name may hold.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def is_header_name(name: str) -> bool:
    return _TOKEN.fullmatch(name) is not None


def key_headers(api_key: str | None, header: str = BEARER) -> dict[str, str]:
    """The headers that carry `api_key`; none without one."""
    if not api_key:
        return {}
    if header.lower() == BEARER.lower():
        return {BEARER: f"Bearer {api_key}"}
    return {header: api_key}
