"""The start of a provider's unexpected answer, for the operator's log only.

A provider's error may echo the request's credentials (some repeat the Authorization
header) or name the operator's account, so it never goes into an error a tenant reads,
and the key this service sent is masked even in the log."""

from __future__ import annotations

MASK = "[the API key]"


def answer_preview(raw: bytes | str, *, limit: int, api_key: str | None) -> str:
    text = raw[:limit].decode("utf-8", "replace") if isinstance(raw, bytes) else raw[:limit]
    if api_key:
        text = text.replace(api_key, MASK)
    return repr(text)
