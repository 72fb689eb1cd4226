"""Bearer API key -> tenant, and whether the tenant may make a request now. With auth
disabled every call acts as the default tenant, under the service's default rate."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.errors import RateLimited, Unauthorized
from app.models import DEFAULT_TENANT_ID
from app.service.metrics import REQUESTS_RATE_LIMITED
from app.tenants.keys import hash_key
from app.tenants.rate_limit import RateLimit, TenantRateLimiter
from app.tenants.repository import KeyLookup


@dataclass(frozen=True)
class Caller:
    tenant_id: uuid.UUID


_bearer = HTTPBearer(auto_error=False, description="An Engram API key: `Bearer egm_...`")


async def current_caller(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),
) -> Caller:
    resources = request.app.state.resources
    limiter: TenantRateLimiter = resources.rate_limiter
    if not resources.settings.auth_enabled:
        _admit(limiter, DEFAULT_TENANT_ID, limiter.default)
        return Caller(DEFAULT_TENANT_ID)
    if credentials is None or not credentials.credentials:
        raise Unauthorized("missing `Authorization: Bearer <api key>` header")
    # One statement on the read pool, outside any transaction: through a session of its
    # own it cost ~2 ms more per request (bench/auth.py), and the request's session, if it
    # has one, must not hold a connection while the request embeds text.
    owner = await KeyLookup(await resources.search_reader()).owner_of_key_hash(
        hash_key(credentials.credentials))
    if owner is None:
        raise Unauthorized("the API key is not valid or has been revoked")
    _admit(limiter, owner.tenant_id, limiter.limit_for(owner.rate_limit))
    return Caller(owner.tenant_id)


def _admit(limiter: TenantRateLimiter, tenant_id: uuid.UUID, limit: RateLimit) -> None:
    """Before the request does any work, so a refused one changes nothing."""
    wait = limiter.take(tenant_id, limit)
    if wait > 0:
        REQUESTS_RATE_LIMITED.inc()
        raise RateLimited(
            f"this tenant's requests came faster than its limit ({limit.describe()}); "
            f"retry in {wait:.2f} s", retry_after=max(1, math.ceil(wait)))
