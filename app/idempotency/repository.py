"""SQL for idempotency records."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from app.db import Fetcher, delete_in_batches
from app.errors import PROBLEM_BASE
from app.models import IdempotencyRecord


class IdempotencyRepository:
    def __init__(self, session: AsyncSession, tenant_id: uuid.UUID) -> None:
        self.session = session
        self.tenant_id = tenant_id

    async def claim(self, key: str, operation: str, request_hash: bytes) -> bool:
        """Insert the key; False when it exists. A concurrent claim of the same key waits
        on the unique index until the first transaction ends, which is what makes a
        concurrent duplicate wait for the first request's answer."""
        stmt = (
            insert(IdempotencyRecord)
            .values(tenant_id=self.tenant_id, key=key, operation=operation,
                    request_hash=request_hash)
            .on_conflict_do_nothing(index_elements=["tenant_id", "key"])
            .returning(IdempotencyRecord.key)
        )
        return (await self.session.execute(stmt)).first() is not None

    async def get(self, key: str) -> IdempotencyRecord | None:
        stmt = select(IdempotencyRecord).where(
            IdempotencyRecord.tenant_id == self.tenant_id, IdempotencyRecord.key == key
        ).with_for_update()
        return (await self.session.scalars(stmt)).one_or_none()

    async def reclaim(self, key: str, operation: str, request_hash: bytes) -> None:
        await self.session.execute(
            update(IdempotencyRecord)
            .where(IdempotencyRecord.tenant_id == self.tenant_id, IdempotencyRecord.key == key)
            .values(operation=operation, request_hash=request_hash, status_code=None,
                    response_body=None, names=[], created_at=func.now())
        )

    async def complete(self, key: str, status_code: int, body: str,
                       names: Sequence[str] = ()) -> None:
        await self.session.execute(
            update(IdempotencyRecord)
            .where(IdempotencyRecord.tenant_id == self.tenant_id, IdempotencyRecord.key == key)
            .values(status_code=status_code, response_body=body, names=list(names))
        )


def named_memories(ids: Iterable[object]) -> list[str]:
    """What a stored answer holding these memories names (migration 0034)."""
    return [f"memory:{memory_id}" for memory_id in ids]


def named_sessions(ids: Iterable[str]) -> list[str]:
    """What a stored answer holding turns of these sessions names (migration 0034)."""
    return [f"session:{session_id}" for session_id in ids]


ERASED_STATUS = 410
ERASED_ANSWER = json.dumps({
    "type": PROBLEM_BASE + "answer_erased", "title": "Answer erased", "status": ERASED_STATUS,
    "detail": "this key's request was done, and what its answer named has since been "
              "deleted or its history erased, so the answer was erased with it; nothing "
              "was done again"}, separators=(",", ":"))


async def erase_answers(session: AsyncSession | AsyncConnection, tenant_id: uuid.UUID,
                        names: Sequence[str]) -> int:
    """Replace the stored answers naming any of `names` with a 410 that quotes nothing,
    in the caller's transaction; how many. The key stays, so a retry is still not done
    again."""
    if not names:
        return 0
    result = await session.execute(
        update(IdempotencyRecord)
        .where(IdempotencyRecord.tenant_id == tenant_id,
               IdempotencyRecord.names.overlap(list(names)))
        .values(status_code=ERASED_STATUS, response_body=ERASED_ANSWER, names=[])
        .execution_options(synchronize_session=False))
    return int(getattr(result, "rowcount", 0) or 0)


async def erase_answers_across(session: AsyncSession | AsyncConnection,
                               gone: Iterable[tuple[uuid.UUID, Any]],
                               named: Callable[[Iterable[Any]], list[str]]) -> int:
    """`erase_answers` for what a maintenance purge took across tenants: (tenant, id)
    pairs, `named` naming the ids; one statement a tenant."""
    by_tenant: dict[uuid.UUID, list[Any]] = {}
    for tenant_id, thing in gone:
        by_tenant.setdefault(tenant_id, []).append(thing)
    return sum([await erase_answers(session, tenant_id, named(things))
                for tenant_id, things in by_tenant.items()])


@dataclass(frozen=True, slots=True)
class StoredKey:
    """A key's record as a read outside any transaction found it."""

    operation: str
    request_hash: bytes
    status_code: int | None
    response_body: str | None
    created_at: datetime


async def stored_key(db: Fetcher, tenant_id: uuid.UUID, key: str) -> StoredKey | None:
    """The key's record, read in a statement of its own on a read pool (no transaction,
    no lock): a look before a create's slow work, which `claim` then settles."""
    rows = await db.fetch(
        "SELECT operation, request_hash, status_code, response_body, created_at"
        " FROM idempotency_keys WHERE tenant_id = $1 AND key = $2", tenant_id, key)
    return StoredKey(*rows[0]) if rows else None


async def purge_older_than(engine: AsyncEngine, cutoff: datetime, batch: int = 1000) -> int:
    """Forget keys past their retention, across tenants (a maintenance job, not a request);
    how many. `batch` keys a transaction, oldest first, through ix_idempotency_keys_created_at,
    as the other purges: one DELETE of them all ran past the statement timeout once a
    backlog had grown (millions of keys, or large stored answers), failed every round
    after, and the table grew for ever. Keys a request holds are left for the next round."""
    key = tuple_(IdempotencyRecord.tenant_id, IdempotencyRecord.key)
    old = (
        select(IdempotencyRecord.tenant_id, IdempotencyRecord.key)
        .where(IdempotencyRecord.created_at < cutoff)
        .order_by(IdempotencyRecord.created_at)
        .limit(batch)
        .with_for_update(skip_locked=True)
    )
    return await delete_in_batches(engine, delete(IdempotencyRecord).where(key.in_(old)), batch)
