"""Bearer API key -> tenant. With auth disabled every call acts as the default tenant."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.errors import Unauthorized
from app.models import DEFAULT_TENANT_ID
from app.tenants.keys import hash_key
from app.tenants.repository import TenantRepository


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
    # Its own short transaction: the request's session should not hold a connection
    # while the request embeds text.
    async with resources.sessionmaker() as session:
        tenant_id = await TenantRepository(session).tenant_for_key_hash(
            hash_key(credentials.credentials)
        )
    if tenant_id is None:
        raise Unauthorized("the API key is not valid or has been revoked")
    return Caller(tenant_id)
