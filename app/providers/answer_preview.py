"""What the operator's log keeps of a provider's unexpected answer.

A provider's error may echo the request's credentials (some repeat the Authorization
header, or the URL with its user, password and query) or name the operator's account, so
it never goes into an error a tenant reads; in the log the key this service sent and the
base URL's credentials are masked. An answer may also echo what users wrote (an
embeddings endpoint's 500 repeating its input, in its body or in its error's message; an
LLM's completion cut by its length, which is a summary of users' memories), so the
WARNING line keeps only the error's code or type, words from a provider's fixed list
(`model_not_found`, `invalid_request_error`); its message and the answer's start are
logged at DEBUG (an observability probe found users' memory and turn text at WARNING,
and its re-probe in an error message that quoted the request)."""

from __future__ import annotations

import base64
import json
import logging
import re
from urllib.parse import unquote, unquote_plus, urlsplit

from app.service.log_format import redact_urls

MASK = "[the API key]"
SECRET = "[redacted]"


def secrets_of(base_url: str | None) -> tuple[str, ...]:
    """What of the base URL must not reach a log, should a provider echo it: its user,
    password (as written, decoded, and as an HTTP Basic header carries them) and query
    values (as written and decoded), each also as JSON escapes it."""
    if not base_url:
        return ()
    parts = urlsplit(base_url)
    found: list[str] = []
    if parts.username or parts.password:
        user, password = unquote(parts.username or ""), unquote(parts.password or "")
        found += [parts.username or "", user, password, parts.password or "",
                  base64.b64encode(f"{user}:{password}".encode()).decode()]
    for pair in parts.query.split("&"):
        written = pair.partition("=")[2]
        found += [written, unquote_plus(written)]
    found += [json.dumps(secret)[1:-1] for secret in found]
    # Longest first, so a value inside another is not masked in part; a value of one or
    # two characters would mask every such run of the text, and guards nothing.
    return tuple(sorted({s for s in found if len(s) >= 3}, key=len, reverse=True))


def _masked(text: str, limit: int, api_key: str | None, secrets: tuple[str, ...]) -> str:
    # Masked before it is cut: a secret across the cut kept its start (a re-probe).
    longest = max([len(api_key or ""), *map(len, secrets)], default=0)
    text = text[:limit + longest]
    if api_key:
        for form in {api_key, json.dumps(api_key)[1:-1]}:
            text = text.replace(form, MASK)
    for secret in secrets:
        text = text.replace(secret, SECRET)
    return redact_urls(text)[:limit]


def answer_preview(raw: bytes | str, *, limit: int, api_key: str | None,
                   secrets: tuple[str, ...] = ()) -> str:
    """The answer's start, masked: for DEBUG lines."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return repr(_masked(text, limit, api_key, secrets))


_CODE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")


def provider_code(raw: bytes | str) -> str | None:
    """The code or type of an OpenAI-shaped error body (`{"error": {"code": ...,
    "type": ...}}`, TEI's `error_type`): words from the provider's own list, which echo
    nothing of the request; None for any other answer."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    error = doc.get("error")
    places = [error, doc] if isinstance(error, dict) else [doc]
    words = [v for place in places for key in ("code", "type", "error_type")
             if isinstance(v := place.get(key), str) and _CODE.fullmatch(v)]
    return ", ".join(dict.fromkeys(words)) or None


def log_unexpected_answer(logger: logging.Logger, what: str, answer: str, raw: bytes | str,
                          *, limit: int, api_key: str | None,
                          secrets: tuple[str, ...]) -> None:
    """`what` failed at WARNING, with the provider's error code if it gave one; the
    answer's start, masked, at DEBUG (`answer` names it: "the LLM's answer")."""
    code = provider_code(raw)
    if code:
        # Masked too: a provider echoing the key as its error's code put "sk-..." at
        # WARNING, its words fitting a code's (an exploratory probe).
        code = _masked(code, len(code), api_key, secrets)
    logger.warning("%s%s", what, f" ({code})" if code else "")
    logger.debug("%s began %s", answer,
                 answer_preview(raw, limit=limit, api_key=api_key, secrets=secrets))
