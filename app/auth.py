"""Bearer API key -> tenant. With auth disabled every call acts as the default tenant."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.errors import Unauthorized
from app.models import DEFAULT_TENANT_ID
from app.tenants.keys import hash_key
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
    if not resources.settings.auth_enabled:
        return Caller(DEFAULT_TENANT_ID)
    if credentials is None or not credentials.credentials:
        raise Unauthorized("missing `Authorization: Bearer <api key>` header")
    # One statement on the read pool, outside any transaction: through a session of its
    # own it cost ~2 ms more per request (bench/auth.py), and the request's session, if it
    # has one, must not hold a connection while the request embeds text.
    tenant_id = await KeyLookup(await resources.search_reader()).tenant_for_key_hash(
        hash_key(credentials.credentials))
    if tenant_id is None:
        raise Unauthorized("the API key is not valid or has been revoked")
    return Caller(tenant_id)
