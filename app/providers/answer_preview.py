"""What the operator's log keeps of a provider's unexpected answer.

A provider's error may echo the request's credentials (some repeat the Authorization
header, or the URL with its user, password and query) or name the operator's account, so
it never goes into an error a tenant reads; in the log the key this service sent and the
base URL's credentials are masked. An answer may also echo what users wrote (an
embeddings endpoint's 500 repeating its input; an LLM's completion cut by its length,
which is a summary of users' memories), so the WARNING line keeps only the provider's
own error message, from an OpenAI-shaped error body; the answer's start is logged at
DEBUG (an observability probe found users' memory and turn text at WARNING)."""

from __future__ import annotations

import base64
import json
from urllib.parse import parse_qsl, unquote, urlsplit

from app.service.log_format import redact_urls

MASK = "[the API key]"
SECRET = "[redacted]"


def secrets_of(base_url: str | None) -> tuple[str, ...]:
    """What of the base URL must not reach a log, should a provider echo it: its user,
    password (as written, and as an HTTP Basic header carries them) and query values."""
    if not base_url:
        return ()
    parts = urlsplit(base_url)
    found: list[str] = []
    if parts.username is not None:
        user, password = unquote(parts.username), unquote(parts.password or "")
        found += [parts.username, user, password, parts.password or "",
                  base64.b64encode(f"{user}:{password}".encode()).decode()]
    found += [value for _, value in parse_qsl(parts.query)]
    # Longest first, so a value inside another is not masked in part.
    return tuple(sorted({s for s in found if len(s) >= 4}, key=len, reverse=True))


def _masked(text: str, api_key: str | None, secrets: tuple[str, ...]) -> str:
    if api_key:
        text = text.replace(api_key, MASK)
    for secret in secrets:
        text = text.replace(secret, SECRET)
    return redact_urls(text)


def answer_preview(raw: bytes | str, *, limit: int, api_key: str | None,
                   secrets: tuple[str, ...] = ()) -> str:
    """The answer's start, masked: for DEBUG lines."""
    text = raw[:limit].decode("utf-8", "replace") if isinstance(raw, bytes) else raw[:limit]
    return repr(_masked(text, api_key, secrets))


def provider_message(raw: bytes | str, *, limit: int, api_key: str | None,
                     secrets: tuple[str, ...] = ()) -> str | None:
    """The provider's own words of an OpenAI-shaped error body (`{"error": {"message":
    ...}}`, `{"error": "..."}`, `{"message": ...}`, `{"detail": ...}`), masked; None for
    any other answer."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    error = doc.get("error")
    said = error.get("message") if isinstance(error, dict) else error
    if not isinstance(said, str):
        said = next((v for k in ("message", "detail") if isinstance(v := doc.get(k), str)),
                    None)
    if not said:
        return None
    return repr(_masked(said[:limit], api_key, secrets))
