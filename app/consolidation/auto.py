"""Automatic consolidation: every N memories written in a scope enqueue a synthesize-only
run of that scope (`ENGRAM_AUTO_CONSOLIDATE_EVERY`, 0 = off).

The memory write path calls `AutoConsolidation.after_write` with the rows it inserted,
in its own transaction. The count and the enqueue happen inside a SAVEPOINT: if either
fails, the savepoint is rolled back, the failure is logged, and the write goes on. The
job runs later in the worker; its failure never reaches the write.

Only memories with at least one scope field count: a run over "no scope" would fold
the whole tenant, which the guard refuses. Summaries are written by the consolidation
executor, not this path, so they never count.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.consolidation.locks import scope_key
from app.models import SCOPE_COLUMNS, ScopeWriteCounter
from app.worker.queue import enqueue, job_running

log = logging.getLogger("engram.consolidation")

AUTO_JOB = "consolidation.auto"

Scope = tuple[str | None, str | None, str | None, str | None]


class AutoConsolidation:
    def __init__(self, session: AsyncSession, tenant_id: uuid.UUID, every: int) -> None:
        self.session = session
        self.tenant_id = tenant_id
        self.every = every

    async def after_write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        written: Counter[Scope] = Counter()
        for row in rows:
            scope: Scope = (row["user_id"], row["agent_id"], row["session_id"],
                            row["namespace"])
            if any(v is not None for v in scope):
                written[scope] += 1
        if not written or self.every <= 0:
            return
        try:
            async with self.session.begin_nested():
                await self._count_and_enqueue(written)
        except Exception:
            log.exception("automatic consolidation could not be counted or queued; "
                          "the write goes on")

    async def _count_and_enqueue(self, written: Counter[Scope]) -> None:
        keys = {scope_key(s): s for s in written}
        # One statement, rows in key order: two writers never lock counters crosswise.
        values = insert(ScopeWriteCounter).values([
            {"tenant_id": self.tenant_id, "scope_key": key, "written": written[keys[key]]}
            for key in sorted(keys)
        ])
        stmt = values.on_conflict_do_update(
            index_elements=["tenant_id", "scope_key"],
            set_={"written": ScopeWriteCounter.written + values.excluded.written,
                  "updated_at": func.now()},
        ).returning(ScopeWriteCounter.scope_key, ScopeWriteCounter.written)
        for key, total in (await self.session.execute(stmt)).all():
            before = total - written[keys[key]]
            if total // self.every > before // self.every:
                await self._enqueue(keys[key], dedupe_key(self.tenant_id, keys[key]))

    async def requeue(self, scope: Scope) -> None:
        """Queue the scope's run again: its running job was cut by the worker stopping,
        and pgqueuer drops a cancelled job, so the trigger was lost and the scope's rows
        waited for N more writes (a probe of two replicas)."""
        await self._enqueue(scope, dedupe_key(self.tenant_id, scope))

    async def _enqueue(self, scope: Scope, dedupe_key: str) -> None:
        """Queue the scope's run, unless one is waiting: that one will read these rows too.
        One already running has read its candidates, and skipping then lost the trigger
        (the rows waited for N more writes, for ever in a scope gone quiet), so one more
        run is queued behind it, under a key of its own: at most one waits."""
        if await enqueue(self.session, AUTO_JOB, self._payload(scope),
                         dedupe_key=dedupe_key) is not None:
            return
        if await job_running(self.session, dedupe_key):
            await enqueue(self.session, AUTO_JOB, self._payload(scope),
                          dedupe_key=f"{dedupe_key}:next")

    def _payload(self, scope: Scope) -> dict[str, Any]:
        return {"tenant_id": str(self.tenant_id), **dict(zip(SCOPE_COLUMNS, scope, strict=True))}


def dedupe_key(tenant_id: uuid.UUID, scope: Scope) -> str:
    """The key a scope's queued run is held under: at most one waits."""
    return f"{AUTO_JOB}:{tenant_id}:{scope_key(scope)}"


def payload_scope(payload: Mapping[str, Any]) -> Scope:
    user, agent, session, namespace = (payload.get(c) for c in SCOPE_COLUMNS)
    return user, agent, session, namespace
