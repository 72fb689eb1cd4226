"""SQL for sessions: the session row (locked while a turn is appended or a fold is
saved), the turn log, and the events.

Every statement is confined to the repository's tenant; `stalled_folds`, which the
crash sweep runs over every tenant, is the module-level function.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, delete, func, insert, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.ids import uuid7
from app.models import ChatSession, SessionEvent, SessionTurn
from app.service.metrics import SESSION_EVENTS
from app.sessions.folding import Chunk
from app.sessions.health import Health, HealthState
from app.sessions.types import SessionState, StrategyName, TurnView

_TURN_COLUMNS = (SessionTurn.seq, SessionTurn.role, SessionTurn.content, SessionTurn.tokens,
                 SessionTurn.created_at, SessionTurn.user_id, SessionTurn.agent_id)


def _state(row: ChatSession) -> SessionState:
    health_state: HealthState = row.health  # type: ignore[assignment]  # CHECK constraint
    strategy: StrategyName = row.strategy  # type: ignore[assignment]  # CHECK constraint
    return SessionState(
        session_id=row.session_id, user_id=row.user_id, agent_id=row.agent_id,
        strategy=strategy, turns=row.turn_count, cursor=row.cursor,
        dropped=row.dropped_turns, summary=row.summary,
        summary_updated_at=row.summary_updated_at,
        health=Health(health_state, row.health_failures, row.health_successes),
        last_error=row.last_error, health_changed_at=row.health_changed_at,
        created_at=row.created_at, updated_at=row.updated_at,
        fold_due_since=row.fold_due_since)


def _turn(row: Any) -> TurnView:
    return TurnView(seq=row.seq, role=row.role, content=row.content, tokens=row.tokens,
                    created_at=row.created_at, user_id=row.user_id, agent_id=row.agent_id)


@dataclass(frozen=True, slots=True)
class SessionFilter:
    user_id: str | None = None
    agent_id: str | None = None
    strategy: StrategyName | None = None
    health: HealthState | None = None


class SessionRepository:
    def __init__(self, session: AsyncSession, tenant_id: uuid.UUID) -> None:
        self.session = session
        self.tenant_id = tenant_id

    def _this(self, session_id: str) -> ColumnElement[bool]:
        return (ChatSession.tenant_id == self.tenant_id) & (ChatSession.session_id == session_id)

    async def get(self, session_id: str, *, lock: bool = False) -> SessionState | None:
        stmt = select(ChatSession).where(self._this(session_id))
        if lock:
            # NO KEY UPDATE: an event or turn inserted meanwhile (its foreign key takes a
            # KEY SHARE lock on this row) is not made to wait.
            stmt = stmt.with_for_update(key_share=True)
        row = (await self.session.execute(stmt)).scalar_one_or_none()
        return _state(row) if row is not None else None

    async def lock_or_create(self, session_id: str,
                             strategy: StrategyName) -> tuple[SessionState, bool]:
        """The session's row, locked until the transaction ends, created first if new; and
        whether this call created it."""
        created = False
        while True:
            found = await self.get(session_id, lock=True)
            if found is not None:
                return found, created
            # Nothing is inserted when a racing request created it first; and a racing
            # delete may remove it again before it is locked: hence the loop.
            inserted = await self.session.execute(
                pg_insert(ChatSession)
                .values(tenant_id=self.tenant_id, session_id=session_id, strategy=strategy)
                .on_conflict_do_nothing().returning(ChatSession.session_id))
            created = inserted.first() is not None

    async def append(self, state: SessionState, role: str, content: str,
                     user_id: str | None, agent_id: str | None, tokens: int) -> TurnView:
        """Add the session's next turn; the session adopts an identity it did not have."""
        seq = state.turns + 1
        row = (await self.session.execute(
            insert(SessionTurn)
            .values(tenant_id=self.tenant_id, session_id=state.session_id, seq=seq,
                    role=role, content=content, user_id=user_id, agent_id=agent_id,
                    tokens=tokens)
            .returning(*_TURN_COLUMNS))).one()
        await self.session.execute(
            update(ChatSession).where(self._this(state.session_id))
            .values(turn_count=seq,
                    user_id=func.coalesce(ChatSession.user_id, user_id),
                    agent_id=func.coalesce(ChatSession.agent_id, agent_id),
                    updated_at=func.now()))
        return _turn(row)

    async def set_strategy(self, session_id: str, strategy: StrategyName) -> None:
        await self.session.execute(
            update(ChatSession).where(self._this(session_id))
            .values(strategy=strategy, updated_at=func.now()))

    async def mark_fold_due(self, session_id: str) -> None:
        """Flag the session for the sweep, unless it is flagged already (so an append while
        a fold is due changes no indexed column)."""
        await self.session.execute(
            update(ChatSession)
            .where(self._this(session_id), ChatSession.fold_due_since.is_(None))
            .values(fold_due_since=func.now()))

    async def clear_fold_due(self, session_id: str) -> None:
        await self.session.execute(
            update(ChatSession)
            .where(self._this(session_id), ChatSession.fold_due_since.is_not(None))
            .values(fold_due_since=None))

    async def drop_folds(self, session_id: str, cursor: int, dropped: int) -> None:
        await self.session.execute(
            update(ChatSession).where(self._this(session_id))
            .values(cursor=cursor, dropped_turns=ChatSession.dropped_turns + dropped))

    async def save_fold(self, session_id: str, cursor: int, summary: str,
                        health: Health, changed: bool, *, more_due: bool) -> None:
        values = self._health(health, changed, None)
        if not more_due:
            values["fold_due_since"] = None
        await self.session.execute(
            update(ChatSession).where(self._this(session_id))
            .values(cursor=cursor, summary=summary, summary_updated_at=func.now(), **values))

    async def save_failure(self, session_id: str, health: Health, changed: bool,
                           error: str) -> None:
        await self.session.execute(
            update(ChatSession).where(self._this(session_id))
            .values(**self._health(health, changed, error)))

    @staticmethod
    def _health(health: Health, changed: bool, error: str | None) -> dict[str, Any]:
        values: dict[str, Any] = {
            "health": health.state, "health_failures": health.failures,
            "health_successes": health.successes}
        if error is not None:
            values["last_error"] = error
        if changed:
            values["health_changed_at"] = func.now()
        return values

    async def delete(self, session_id: str) -> bool:
        """Delete the session with its turns and events (the foreign keys cascade)."""
        result = await self.session.execute(
            delete(ChatSession).where(self._this(session_id)).returning(ChatSession.session_id))
        return result.first() is not None

    async def add_event(self, session_id: str, kind: str, detail: Mapping[str, Any]) -> None:
        await self.session.execute(
            insert(SessionEvent).values(tenant_id=self.tenant_id, id=uuid7(),
                                        session_id=session_id, kind=kind,
                                        detail=dict(detail),
                                        # Not now(), the transaction's start: events of
                                        # one request (a switch, then the folds it drops)
                                        # must list in the order they happened.
                                        created_at=func.clock_timestamp()))
        SESSION_EVENTS.labels(kind).inc()

    async def newest_turns(self, session_id: str, after: int, limit: int) -> list[TurnView]:
        """Up to `limit` of the newest turns with seq > `after`, oldest first."""
        rows = (await self.session.execute(
            select(*_TURN_COLUMNS)
            .where(SessionTurn.tenant_id == self.tenant_id,
                   SessionTurn.session_id == session_id, SessionTurn.seq > after)
            .order_by(SessionTurn.seq.desc()).limit(limit))).all()
        return [_turn(r) for r in reversed(rows)]

    async def turns_before(self, session_id: str, before: int | None,
                           limit: int) -> list[TurnView]:
        """Up to `limit` turns, newest first, with seq < `before` when given."""
        stmt = (select(*_TURN_COLUMNS)
                .where(SessionTurn.tenant_id == self.tenant_id,
                       SessionTurn.session_id == session_id)
                .order_by(SessionTurn.seq.desc()).limit(limit))
        if before is not None:
            stmt = stmt.where(SessionTurn.seq < before)
        return [_turn(r) for r in (await self.session.execute(stmt)).all()]

    async def turns_in(self, session_id: str, chunk: Chunk) -> list[TurnView]:
        rows = (await self.session.execute(
            select(*_TURN_COLUMNS)
            .where(SessionTurn.tenant_id == self.tenant_id,
                   SessionTurn.session_id == session_id,
                   SessionTurn.seq.between(chunk.first, chunk.last))
            .order_by(SessionTurn.seq))).all()
        return [_turn(r) for r in rows]

    async def list(self, filters: SessionFilter, limit: int,
                   after: tuple[datetime, str] | None) -> list[SessionState]:
        """Up to `limit` sessions, newest first (created_at, then id), after the cursor
        position `after`."""
        stmt = (select(ChatSession).where(ChatSession.tenant_id == self.tenant_id)
                .order_by(ChatSession.created_at.desc(), ChatSession.session_id.desc())
                .limit(limit))
        for column, value in ((ChatSession.user_id, filters.user_id),
                              (ChatSession.agent_id, filters.agent_id),
                              (ChatSession.strategy, filters.strategy),
                              (ChatSession.health, filters.health)):
            if value is not None:
                stmt = stmt.where(column == value)
        if after is not None:
            stmt = stmt.where(tuple_(ChatSession.created_at, ChatSession.session_id)
                              < tuple_(*after))
        return [_state(row) for row in (await self.session.execute(stmt)).scalars()]

    async def events(self, session_id: str, limit: int,
                     after: tuple[datetime, uuid.UUID] | None) -> Sequence[SessionEvent]:
        """Up to `limit` events, newest first, after the cursor position `after`."""
        stmt = (select(SessionEvent)
                .where(SessionEvent.tenant_id == self.tenant_id,
                       SessionEvent.session_id == session_id)
                .order_by(SessionEvent.created_at.desc(), SessionEvent.id.desc())
                .limit(limit))
        if after is not None:
            stmt = stmt.where(tuple_(SessionEvent.created_at, SessionEvent.id)
                              < tuple_(*after))
        return (await self.session.execute(stmt)).scalars().all()


async def stalled_folds(session: AsyncSession, limit: int) -> list[tuple[uuid.UUID, str]]:
    """Sessions, in any tenant, flagged with a fold due, longest waiting first: the sweep
    queues their fold job again (a job that gave up, or an append whose job was still
    finishing)."""
    rows = await session.execute(
        select(ChatSession.tenant_id, ChatSession.session_id)
        .where(ChatSession.fold_due_since.is_not(None))
        .order_by(ChatSession.fold_due_since).limit(limit))
    return [(r.tenant_id, r.session_id) for r in rows]


async def purge_idle(engine: AsyncEngine, idle: timedelta, batch: int = 100) -> int:
    """Delete the sessions, in any tenant, with no append or strategy change for `idle`,
    with their turns and events (the foreign keys cascade); how many. A maintenance job.

    `batch` sessions a transaction, each possibly holding thousands of turns. A session
    a request has locked (an append under way) is skipped and left for the next round,
    so neither waits; the lock's holder has made it active anyway. `updated_at` is not
    indexed: an index on it would make every append a non-HOT update of the session row
    (migration 0016), so each round scans the table instead."""
    idle_ones = (
        select(ChatSession.tenant_id, ChatSession.session_id)
        .where(ChatSession.updated_at < func.now() - idle)
        .limit(batch)
        .with_for_update(skip_locked=True)
    )
    stmt = delete(ChatSession).where(
        tuple_(ChatSession.tenant_id, ChatSession.session_id).in_(idle_ones))
    total = 0
    while True:
        async with engine.begin() as conn:
            removed = int((await conn.execute(stmt)).rowcount or 0)
        total += removed
        if removed < batch:
            return total
