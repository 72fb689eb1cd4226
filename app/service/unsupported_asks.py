"""Refuses, from its head alone, what an API request asks that the service does not do,
where going on would do something else than was asked (an HTTP probe):

- a body in a content coding (`Content-Encoding: gzip`): read as it came, a gzipped body
  was "not valid UTF-8", and a plain one labelled gzip was stored: 415 (RFC 9110
  15.5.16), naming `identity` as the one it reads;
- a transfer coding besides `chunked` (`Transfer-Encoding: gzip, chunked`): its bytes
  were read as they came: 501 (RFC 9112 6.1);
- a patch document of another format (`application/merge-patch+json`,
  `application/json-patch+json`): a merge patch's nulls were stored as values, where
  RFC 7396 removes those fields: 415 with `Accept-Patch` (RFC 5789 2.2);
- `If-Match` with an entity tag: the service gives none, so none can match, and the
  change a client made conditional was applied all the same: 412 (RFC 9110 13.1.1).
  `If-Match: *` holds for any resource that exists, and goes on.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import AppError, app_error_response

API_PREFIX = "/v1/"
_PATCH_FORMATS = frozenset({"application/merge-patch+json", "application/json-patch+json"})


class UnsupportedMediaType(AppError):
    status, code, title = 415, "unsupported_media_type", "Unsupported media type"


class NotImplementedCoding(AppError):
    status, code, title = 501, "not_implemented", "Not implemented"


class PreconditionFailed(AppError):
    status, code, title = 412, "precondition_failed", "Precondition failed"


def refusal(headers: list[tuple[bytes, bytes]]) -> AppError | None:
    """What of the request's head asks for what the service does not do, if anything. A
    body's coding and format only where there is a body: a client sending a compression
    header with every request had its reads refused (a re-probe)."""
    has_body = any(name == b"transfer-encoding" or (name == b"content-length"
                                                    and raw.strip() not in (b"", b"0"))
                   for name, raw in headers)
    for name, raw in headers:
        if name not in (b"content-encoding", b"transfer-encoding", b"content-type",
                        b"if-match"):
            continue
        value = raw.decode("latin-1").strip()
        if not value or (not has_body and name in (b"content-encoding", b"content-type")):
            continue
        if name == b"content-encoding":
            codings = [c.strip().lower() for c in value.split(",") if c.strip()]
            if any(c != "identity" for c in codings):
                return UnsupportedMediaType(
                    f"the body is sent in the content coding {value!r}; this service reads "
                    "bodies as they are (identity): send it uncompressed",
                    headers={"Accept-Encoding": "identity"})
        elif name == b"transfer-encoding":
            codings = [c.strip().lower() for c in value.split(",") if c.strip()]
            if any(c != "chunked" for c in codings):
                return NotImplementedCoding(
                    f"the transfer coding {value!r} is not one this service reads "
                    "(chunked alone is)")
        elif name == b"content-type":
            kind = value.split(";", 1)[0].strip().lower()
            if kind in _PATCH_FORMATS:
                return UnsupportedMediaType(
                    f"a {kind} document is not read here: a PATCH body is application/json, "
                    "each field given replacing the stored one (metadata whole)",
                    headers={"Accept-Patch": "application/json"})
        elif value != "*":
            return PreconditionFailed(
                "If-Match names an entity tag, and this service gives none (no ETag), so "
                "it cannot hold: nothing was changed. Changes here are not conditional: "
                "send it without If-Match (or with If-Match: *)")
    return None


class UnsupportedAsksMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].startswith(API_PREFIX):
            refused = refusal(scope["headers"])
            if refused is not None:
                await app_error_response(refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)
