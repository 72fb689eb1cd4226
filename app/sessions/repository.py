"""SQL for sessions: the session row (locked while a turn is appended or a fold is
saved), the turn log, and the events. `SessionRepository` writes, in the request's or the
fold's transaction; `SessionReader` answers the read endpoints on the reads' own pool.

Every statement is confined to the repository's tenant; `stalled_folds` and `purge_idle`,
which the maintenance rounds run over every tenant, are the module-level functions.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Row, delete, func, insert, select, tuple_, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from app.db import Fetcher, delete_in_batches, jsonb
from app.idempotency.repository import erase_answers_across, named_sessions
from app.ids import uuid7
from app.models import ChatSession, SessionEvent, SessionTurn, Tenant
from app.service.metrics import SESSION_EVENTS
from app.sessions.folding import Chunk
from app.sessions.health import Health, SessionHealthState
from app.sessions.types import SessionState, SessionStrategy, TurnView

SESSION_KEYS = ("session_id", "user_id", "agent_id", "strategy", "turn_count", "cursor",
                "dropped_turns", "summary", "summary_updated_at", "health", "health_failures",
                "health_successes", "last_error", "health_changed_at", "created_at",
                "updated_at", "fold_due_since")
TURN_KEYS = ("seq", "role", "content", "tokens", "created_at", "user_id", "agent_id")
EVENT_KEYS = ("id", "kind", "detail", "created_at")

_SESSIONS = ChatSession.__table__.c
_SESSION_COLUMNS = [_SESSIONS[k] for k in SESSION_KEYS]
_TURN_COLUMNS = [SessionTurn.__table__.c[k] for k in TURN_KEYS]
# The same columns as a select list, for the reader's statements written as text.
_SESSION_SQL = ", ".join(f'"{k}"' for k in SESSION_KEYS)
_TURN_SQL = ", ".join(TURN_KEYS)
_LAST_SEQ = 2**31 - 1


def _state(row: Mapping[Any, Any]) -> SessionState:
    health_state: SessionHealthState = row["health"]  # CHECK constraint
    strategy: SessionStrategy = row["strategy"]  # CHECK constraint
    return SessionState(
        session_id=row["session_id"], user_id=row["user_id"], agent_id=row["agent_id"],
        strategy=strategy, turns=row["turn_count"], cursor=row["cursor"],
        dropped=row["dropped_turns"], summary=row["summary"],
        summary_updated_at=row["summary_updated_at"],
        health=Health(health_state, row["health_failures"], row["health_successes"]),
        last_error=row["last_error"], health_changed_at=row["health_changed_at"],
        created_at=row["created_at"], updated_at=row["updated_at"],
        fold_due_since=row["fold_due_since"])


def _turn(row: Mapping[Any, Any]) -> TurnView:
    return TurnView(seq=row["seq"], role=row["role"], content=row["content"],
                    tokens=row["tokens"], created_at=row["created_at"],
                    user_id=row["user_id"], agent_id=row["agent_id"])


DELETE_BATCH = 100
"""Sessions one statement of a user's delete removes, each with all its turns."""


@dataclass(frozen=True, slots=True)
class SessionFilter:
    user_id: str | None = None
    agent_id: str | None = None
    strategy: SessionStrategy | None = None
    health: SessionHealthState | None = None


class SessionRepository:
    def __init__(self, session: AsyncSession, tenant_id: uuid.UUID, *,
                 max_events: int | None = None) -> None:
        self.session = session
        self.tenant_id = tenant_id
        # The newest events a session keeps (ENGRAM_SESSION_MAX_EVENTS); None keeps all.
        self.max_events = max_events

    def _this(self, session_id: str) -> ColumnElement[bool]:
        return (ChatSession.tenant_id == self.tenant_id) & (ChatSession.session_id == session_id)

    async def get(self, session_id: str, *, lock: bool = False) -> SessionState | None:
        stmt = select(*_SESSION_COLUMNS).where(self._this(session_id))
        if lock:
            # NO KEY UPDATE: an event or turn inserted meanwhile (its foreign key takes a
            # KEY SHARE lock on this row) is not made to wait.
            stmt = stmt.with_for_update(key_share=True)
        row = (await self.session.execute(stmt)).first()
        return _state(row._mapping) if row is not None else None

    async def lock_or_create(self, session_id: str,
                             strategy: SessionStrategy) -> tuple[SessionState, bool]:
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
            # Stamped now, under the session's lock, as the seq is: the transaction's
            # start (the column's default) came before the lock, so of two appends racing
            # the later seq could carry the earlier time.
            .values(tenant_id=self.tenant_id, session_id=state.session_id, seq=seq,
                    role=role, content=content, user_id=user_id, agent_id=agent_id,
                    tokens=tokens, created_at=func.clock_timestamp())
            .returning(*_TURN_COLUMNS))).one()._mapping
        await self.session.execute(
            update(ChatSession).where(self._this(state.session_id))
            .values(turn_count=seq,
                    user_id=func.coalesce(ChatSession.user_id, user_id),
                    agent_id=func.coalesce(ChatSession.agent_id, agent_id),
                    updated_at=row["created_at"]))
        return _turn(row)

    async def set_strategy(self, session_id: str, strategy: SessionStrategy) -> None:
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

    async def save_health(self, session_id: str, health: Health, changed: bool,
                          error: str | None = None) -> None:
        """The summariser's health after a fold whose summary is not saved (it failed,
        with `error`, or its turns left the backlog meanwhile)."""
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

    async def delete_of(self, *, user_id: str | None, agent_id: str | None,
                        batch: int = DELETE_BATCH) -> list[str]:
        """Delete the sessions of a user, an agent or both, with their turns and events;
        their ids. `batch` sessions a statement (each may hold thousands of turns), all in
        the caller's transaction; until a statement deletes none."""
        preds = [ChatSession.tenant_id == self.tenant_id]
        if user_id is not None:
            preds.append(ChatSession.user_id == user_id)
        if agent_id is not None:
            preds.append(ChatSession.agent_id == agent_id)
        chosen = select(ChatSession.session_id).where(*preds).limit(batch).scalar_subquery()
        stmt = delete(ChatSession).where(
            ChatSession.tenant_id == self.tenant_id, ChatSession.session_id.in_(chosen),
        ).returning(ChatSession.session_id).execution_options(synchronize_session=False)
        deleted: list[str] = []
        while rows := (await self.session.execute(stmt)).scalars().all():
            deleted.extend(rows)
        return deleted

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
        if self.max_events is not None:
            # A client that keeps sending turns with the wrong user, or a summariser that
            # flaps, adds events for as long as the session lives: past the bound, the
            # oldest go (usually one, read through the listing's index).
            beyond = (select(SessionEvent.id)
                      .where(SessionEvent.tenant_id == self.tenant_id,
                             SessionEvent.session_id == session_id)
                      .order_by(SessionEvent.created_at.desc(), SessionEvent.id.desc())
                      .offset(self.max_events))
            await self.session.execute(delete(SessionEvent).where(
                SessionEvent.tenant_id == self.tenant_id, SessionEvent.id.in_(beyond)))

    async def turns_in(self, session_id: str, chunk: Chunk) -> list[TurnView]:
        rows = (await self.session.execute(
            select(*_TURN_COLUMNS)
            .where(SessionTurn.tenant_id == self.tenant_id,
                   SessionTurn.session_id == session_id,
                   SessionTurn.seq.between(chunk.first, chunk.last))
            .order_by(SessionTurn.seq))).all()
        return [_turn(r._mapping) for r in rows]


class SessionReader:
    """The read endpoints' statements: one round trip each on the reads' own asyncpg pool
    (a `Fetcher`; app/search/reader.py), outside any transaction, as the memory reads.
    Through a request session a context read paid the pool's pre-ping, BEGIN and COMMIT
    around its two statements, and the ORM's handling of each row."""

    def __init__(self, db: Fetcher, tenant_id: uuid.UUID) -> None:
        self.db = db
        self.tenant_id = tenant_id

    async def get(self, session_id: str) -> SessionState | None:
        rows = await self.db.fetch(
            f"SELECT {_SESSION_SQL} FROM sessions WHERE tenant_id = $1 AND session_id = $2",
            self.tenant_id, session_id)
        return _state(dict(zip(SESSION_KEYS, rows[0], strict=True))) if rows else None

    async def newest_turns(self, session_id: str, after: int, upto: int,
                           limit: int) -> list[TurnView]:
        """Up to `limit` of the newest turns with `after` < seq <= `upto`, oldest first
        (`upto`: the session as read, without the turns appended since)."""
        rows = await self.db.fetch(
            f"SELECT {_TURN_SQL} FROM session_turns WHERE tenant_id = $1 AND session_id = $2 "
            "AND seq > $3 AND seq <= $4 ORDER BY seq DESC LIMIT $5",
            self.tenant_id, session_id, after, upto, limit)
        return [_turn(dict(zip(TURN_KEYS, r, strict=True))) for r in reversed(rows)]

    async def turns_before(self, session_id: str, before: int | None,
                           limit: int) -> list[TurnView]:
        """Up to `limit` turns, newest first, with seq < `before` when given."""
        rows = await self.db.fetch(
            f"SELECT {_TURN_SQL} FROM session_turns WHERE tenant_id = $1 AND session_id = $2 "
            "AND seq < $3 ORDER BY seq DESC LIMIT $4",
            self.tenant_id, session_id, _LAST_SEQ if before is None else before, limit)
        return [_turn(dict(zip(TURN_KEYS, r, strict=True))) for r in rows]

    async def events(self, session_id: str, limit: int,
                     after: tuple[datetime, uuid.UUID] | None) -> list[dict[str, Any]]:
        """Up to `limit` events, newest first, after the cursor position `after`."""
        args: list[Any] = [self.tenant_id, session_id]
        where = ""
        if after is not None:
            args += after
            where = "AND (created_at, id) < ($3, $4) "
        rows = await self.db.fetch(
            f"SELECT {', '.join(EVENT_KEYS)} FROM session_events "
            f"WHERE tenant_id = $1 AND session_id = $2 {where}"
            f"ORDER BY created_at DESC, id DESC LIMIT ${len(args) + 1}", *args, limit)
        events = [dict(zip(EVENT_KEYS, r, strict=True)) for r in rows]
        for event in events:
            event["detail"] = jsonb(event["detail"])
        return events

    async def list(self, filters: SessionFilter, limit: int,
                   after: tuple[datetime, str] | None) -> list[SessionState]:
        """Up to `limit` sessions, newest first (created_at, then id), after the cursor
        position `after`."""
        args: list[Any] = [self.tenant_id]

        def arg(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        where = ["tenant_id = $1"]
        for column in ("user_id", "agent_id", "strategy", "health"):
            value = getattr(filters, column)
            if value is not None:
                where.append(f"{column} = {arg(value)}")
        if after is not None:
            where.append(f"(created_at, session_id) < ({arg(after[0])}, {arg(after[1])})")
        rows = await self.db.fetch(
            f"SELECT {_SESSION_SQL} FROM sessions WHERE {' AND '.join(where)} "
            f"ORDER BY created_at DESC, session_id DESC LIMIT {arg(limit)}", *args)
        return [_state(dict(zip(SESSION_KEYS, r, strict=True))) for r in rows]


async def stalled_folds(session: AsyncSession, limit: int) -> list[tuple[uuid.UUID, str]]:
    """Sessions, in any tenant that is not suspended, flagged with a fold due, longest
    waiting first: the sweep queues their fold job again (a job that gave up, or an append
    whose job was still finishing)."""
    rows = await session.execute(
        select(ChatSession.tenant_id, ChatSession.session_id)
        .join(Tenant, Tenant.id == ChatSession.tenant_id)
        .where(ChatSession.fold_due_since.is_not(None), Tenant.suspended_at.is_(None))
        .order_by(ChatSession.fold_due_since).limit(limit))
    return [(r.tenant_id, r.session_id) for r in rows]


async def purge_tenant_sessions(engine: AsyncEngine, tenant_id: uuid.UUID,
                                batch: int = DELETE_BATCH) -> int:
    """Delete every session of a tenant with its turns and events, `batch` sessions a
    transaction; how many."""
    chosen = select(ChatSession.session_id).where(ChatSession.tenant_id == tenant_id)
    return await delete_in_batches(engine, delete(ChatSession).where(
        ChatSession.tenant_id == tenant_id,
        ChatSession.session_id.in_(chosen.limit(batch).scalar_subquery())), batch)


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
    return await delete_in_batches(engine, delete(ChatSession).where(
        tuple_(ChatSession.tenant_id, ChatSession.session_id).in_(idle_ones)).returning(
        ChatSession.tenant_id, ChatSession.session_id), batch, then=_erase_answers)


async def _erase_answers(conn: AsyncConnection,
                         gone: Sequence[Row[*tuple[Any, ...]]]) -> None:
    """A keyed append's stored answer quotes its turn: a session that went idle past its
    retention took its turns, and the answer outlived them by the key's hours."""
    await erase_answers_across(conn, ((row[0], row[1]) for row in gone), named_sessions)
