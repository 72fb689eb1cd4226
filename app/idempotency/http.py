"""The Idempotency-Key header of the create endpoints, and answering a create through it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Annotated, Any

from fastapi import Header, Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth import Caller
from app.errors import PROBLEM_JSON, ValidationFailed
from app.idempotency.repository import ERASED_STATUS, IdempotencyRepository, stored_key
from app.idempotency.service import (
    HEADER,
    KEY_PATTERN,
    Earlier,
    IdempotencyService,
    Outcome,
    check_key,
    request_hash,
)
from app.service import request_id

IdempotencyKey = Annotated[
    str | None,
    # Checked by check_key, for a plainer message than the pattern's; declared here so
    # the OpenAPI document states the bounds.
    Header(alias=HEADER, json_schema_extra={"minLength": 1, "maxLength": 255,
                                            "pattern": KEY_PATTERN},
           description="Makes a retry with the same body return the first answer "
                       "(1 to 255 visible ASCII characters; kept at least 24 h)."),
]


def _service(request: Request, session: AsyncSession, caller: Caller) -> IdempotencyService:
    ttl = timedelta(hours=request.app.state.resources.settings.idempotency_ttl_hours)
    return IdempotencyService(IdempotencyRepository(session, caller.tenant_id), ttl)


async def answered_before(request: Request, session: AsyncSession, caller: Caller,
                          key: str | None, operation: str, canonical: Callable[[], Any],
                          earlier: Earlier = None) -> bool:
    """Whether `keyed_create` will replay this request's first answer: what the first
    request did before its `produce` (creating a session) is then not done again."""
    return key is not None and await _service(request, session, caller).answered(
        check_key(key), operation, canonical(), earlier)


async def keyed_create(
    request: Request, session: AsyncSession, caller: Caller, key: str | None,
    operation: str, canonical: Callable[[], Any],
    produce: Callable[[], Awaitable[tuple[int, Any]]],
    ahead: Callable[[], Awaitable[None]] | None = None,
    earlier: Earlier = None,
    names: Callable[[Any], Sequence[str]] = lambda _: (),
) -> Response:
    """Answer `produce`'s (status, JSON value); with a key, at most once per key, a retry
    getting the first answer's bytes. `canonical` gives what identifies the request (only
    called with a key: a batch of 1000 is not free to dump); `earlier`, the forms older
    versions hashed it in, read only for a key whose record's hash differs; `names`,
    what a produced answer names (`memory:<id>`), whose erasure erases the stored answer.

    `ahead`: the create's slow work that needs no database (embedding its texts), done
    before the key is claimed. The claim opens the request's transaction, and a create
    that embedded after it held a writer connection idle in that transaction the whole
    time: 22 keyed batches of one tenant held all 20, and another tenant's write waited
    for one (an exploratory probe). A retry already answered is replayed before it, from
    a read outside any transaction, so it is not embedded again."""
    if key is None:
        if ahead is not None:
            await ahead()
        status, payload = await produce()
        return JSONResponse(payload, status_code=status)
    idempotency = _service(request, session, caller)

    async def rendered() -> tuple[int, str, Sequence[str]]:
        # Kept as sent, so a retry's body is byte for byte the first one's.
        status, payload = await produce()
        return status, bytes(JSONResponse(payload).body).decode(), names(payload)

    if len(request.headers.getlist(HEADER)) > 1:
        # Which one the client meant is unknown: one of them silently used could replay,
        # or fail to replay, the wrong request.
        raise ValidationFailed.on(f"header.{HEADER}", "is given more than once; it takes "
                                                      "one value")
    # Once: for a batch of 1,000 the canonical JSON and its hash are not free.
    key, digest = check_key(key), request_hash(operation, canonical())
    if ahead is not None:
        reads = await request.app.state.resources.memory_reader()
        stored = await stored_key(reads, caller.tenant_id, key)
        early = idempotency.replay(key, stored, operation, digest, earlier)
        if early is not None:
            return _answer(early)
        await ahead()
    return _answer(await idempotency.run(key, operation, digest, rendered, earlier))


def _answer(outcome: Outcome) -> Response:
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else None
    body = outcome.body
    if outcome.status_code == ERASED_STATUS and (rid := request_id.current()) is not None:
        # The stored 410 is one text for every key; this retry's id is in its own logs,
        # as in every other problem answer.
        body = json.dumps({**json.loads(body), "request_id": rid}, separators=(",", ":"))
    return Response(body, status_code=outcome.status_code, headers=headers,
                    media_type=PROBLEM_JSON if outcome.status_code >= 400 else
                    "application/json")
