"""Bearer API key -> tenant, and whether the tenant may make a request now (its rate, its
share of the requests in flight). With auth disabled every call acts as the default
tenant, under the service's default limits.

`settle_caller` runs before the request's body is read (app/service/caller_gate.py):
FastAPI runs dependencies only once it has read the whole body, so a client with no key
could hold a slot for as long as it kept a body coming, and a tenant's requests past its
share each held one while their bodies arrived. `current_caller`, the routes' dependency,
reads what it settled."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from functools import partial

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.errors import (
    INVALID_KEY,
    ConcurrencyLimited,
    RateLimited,
    TenantSuspended,
    Unauthorized,
)
from app.models import DEFAULT_TENANT_ID
from app.service.admission import at_request_end
from app.service.metrics import REQUESTS_RATE_LIMITED
from app.tenants.concurrency import TenantSlots
from app.tenants.keys import hash_key
from app.tenants.rate_limit import RateLimit, TenantRateLimiter
from app.tenants.repository import KeyLookup, KeyOwner, Suspension


@dataclass(frozen=True)
class Caller:
    tenant_id: uuid.UUID
    # The most active memories one of its users holds (its own or the service's); 0: no
    # cap (app/memories/capacity.py).
    memories_per_user: int = 0


_bearer = HTTPBearer(auto_error=False, description="An Engram API key: `Bearer egm_...`")
_CALLER = "engram.caller"


async def current_caller(
    request: Request,
    # Declares the scheme in the OpenAPI document; the key was read before the body.
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
) -> Caller:
    caller: Caller | None = request.scope.get("state", {}).get(_CALLER)
    return caller if caller is not None else await settle_caller(request)


async def settle_caller(request: Request) -> Caller:
    """The request's caller, admitted (its tenant's rate and share taken), remembered for
    `current_caller`; raises the AppError the request earns instead. Reads only headers."""
    caller = await _admitted_caller(request)
    request.scope.setdefault("state", {})[_CALLER] = caller
    return caller


async def _admitted_caller(request: Request) -> Caller:
    resources = request.app.state.resources
    limiter: TenantRateLimiter = resources.rate_limiter
    if not resources.settings.auth_enabled:
        _admit(request, DEFAULT_TENANT_ID, limiter.default, resources.tenant_slots.default)
        return Caller(DEFAULT_TENANT_ID, resources.settings.max_memories_per_user)
    owner = await _key_owner(request, await _bearer(request))
    _admit(request, owner.tenant_id, limiter.limit_for(owner.rate_limit),
           resources.tenant_slots.limit_for(owner.max_in_flight))
    per_user = owner.max_memories_per_user
    return Caller(owner.tenant_id, resources.settings.max_memories_per_user
                  if per_user is None else per_user)


async def _key_owner(request: Request,
                     credentials: HTTPAuthorizationCredentials | None) -> KeyOwner:
    if len(request.headers.getlist("authorization")) > 1:
        # A proxy in front may check one and the service act on another.
        raise Unauthorized("more than one `Authorization` header; send exactly one")
    if credentials is None or not credentials.credentials:
        given = request.headers.get("authorization", "").strip()
        if given and given.partition(" ")[0].lower() != "bearer":
            raise Unauthorized("the `Authorization` header's scheme is not Bearer; send "
                               "`Authorization: Bearer <api key>`")
        raise Unauthorized("missing `Authorization: Bearer <api key>` header")
    # One statement on the read pool, outside any transaction: through a session of its
    # own it cost ~2 ms more per request (bench/auth.py), and the request's session, if it
    # has one, must not hold a connection while the request embeds text.
    owner = await KeyLookup(await request.app.state.resources.search_reader()
                            ).owner_of_key_hash(hash_key(credentials.credentials))
    if owner is None:
        raise Unauthorized(INVALID_KEY)
    if owner.suspension is not None:
        # Before the limits: a refused request takes nothing of the tenant's rate or share.
        raise TenantSuspended(suspended_detail(owner.suspension))
    return owner


def suspended_detail(suspension: Suspension) -> str:
    why = f": {suspension.reason}" if suspension.reason else ""
    return f"this tenant has been suspended since {suspension.since_text()}{why}"


def _admit(request: Request, tenant_id: uuid.UUID, limit: RateLimit, share: int) -> None:
    """The tenant's share of the requests in flight, then its rate; before the request
    does any work, so a refused one changes nothing: neither takes a token nor holds a
    slot (nothing here awaits, so no other request comes in between)."""
    resources = request.app.state.resources
    slots: TenantSlots = resources.tenant_slots
    if not slots.enter(tenant_id, share):
        REQUESTS_RATE_LIMITED.labels("concurrency").inc()
        raise ConcurrencyLimited(
            f"this tenant already has {share} requests in flight here, its share; "
            "retry once one has finished")
    wait = resources.rate_limiter.take(tenant_id, limit)
    if wait > 0:
        if share > 0:
            slots.leave(tenant_id)
        REQUESTS_RATE_LIMITED.labels("rate").inc()
        raise RateLimited(
            f"this tenant's requests came faster than its limit ({limit.describe()}); "
            f"retry in {wait:.2f} s", retry_after=max(1, math.ceil(wait)))
    if share > 0:
        at_request_end(request.scope, partial(slots.leave, tenant_id))
