"""The session rules: appending a turn (identity, the fold backlog, queueing the fold),
choosing a session's strategy and deleting it (`SessionService`, in the request's
transaction); reading sessions, a session's context, its log and its events
(`SessionReads`, one statement at a time on the reads' pool)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from app.cursors import (
    cut_page,
    decode_cursor,
    decode_number_cursor,
    decode_text_cursor,
    listing,
)
from app.errors import FieldError, NotFound, ValidationFailed
from app.idempotency.repository import erase_answers, named_sessions
from app.log_throttle import Throttle
from app.sessions.context import estimate_tokens, fold_warning, strategy_in_force
from app.sessions.folder import enqueue_fold
from app.sessions.folding import FoldPolicy, backlog, overflow
from app.sessions.repository import SessionFilter, SessionReader, SessionRepository
from app.sessions.schemas import (
    AppendedTurn,
    Session,
    SessionBacklog,
    SessionConfig,
    SessionContext,
    SessionCounts,
    SessionEventItem,
    SessionEventPage,
    SessionHealth,
    SessionPage,
    Turn,
    TurnCreate,
    TurnPage,
)
from app.sessions.types import SessionState, SessionStrategy, TurnView

log = logging.getLogger("engram.sessions")
_REFUSED_TURN_LINES = Throttle(flush=lambda count: log.warning(
    "%d more turn(s) refused for another identity since the last report", count))

CONTEXT_MAX_TURNS = 1000
"""At most this many turns are read to build a context, whatever the budget."""


@dataclass(frozen=True, slots=True)
class IdentityRejected:
    """A turn named another user or agent than the session's: nothing was appended."""

    errors: list[FieldError]

    @property
    def detail(self) -> str:
        return "; ".join(f"{e.field}: {e.message}" for e in self.errors)


def _turn(turn: TurnView) -> Turn:
    return Turn(seq=turn.seq, role=turn.role, content=turn.content,
                user_id=turn.user_id, agent_id=turn.agent_id, tokens=turn.tokens,
                created_at=turn.created_at)


def _health(state: SessionState) -> SessionHealth:
    return SessionHealth(state=state.health.state,
                         consecutive_failures=state.health.failures,
                         last_error=state.last_error, changed_at=state.health_changed_at)


def session_answer(s: SessionState, folds: FoldPolicy, retention: timedelta | None) -> Session:
    return Session(
        session_id=s.session_id, user_id=s.user_id, agent_id=s.agent_id,
        strategy=s.strategy, cursor=s.cursor,
        counts=SessionCounts(turns=s.turns, unsummarised=s.turns - s.cursor,
                             summarised=s.cursor - s.dropped, dropped=s.dropped),
        backlog=SessionBacklog(
            due=backlog(s.turns, s.cursor, folds) if s.strategy == "rolling_summary" else 0,
            max=folds.backlog_max),
        health=_health(s), summary_updated_at=s.summary_updated_at,
        created_at=s.created_at, updated_at=s.updated_at,
        expires_at=s.updated_at + retention if retention is not None else None)


class SessionService:
    def __init__(self, repository: SessionRepository, *, strategy: SessionStrategy,
                 folds: FoldPolicy, retention: timedelta | None = None) -> None:
        self.repository = repository
        self.strategy = strategy
        self.folds = folds
        self.retention = retention

    @property
    def _db(self) -> AsyncSession:
        return self.repository.session

    async def admit(self, session_id: str, body: TurnCreate) -> SessionState | IdentityRejected:
        """The session, locked (created if new), when `body` may be appended to it.

        A turn naming another user or agent than the session's is refused, and the refusal
        recorded as an event in this request's transaction, which commits: the turn is
        not appended, the event stays.
        """
        state, _ = await self.repository.lock_or_create(session_id, self.strategy)
        errors = [
            FieldError(field=name, message=f"the session belongs to {name} {have!r}, "
                                           f"not {given!r}")
            for name, have, given in (("user_id", state.user_id, body.user_id),
                                      ("agent_id", state.agent_id, body.agent_id))
            if have is not None and given is not None and given != have
        ]
        if not errors:
            return state
        await self.repository.add_event(session_id, "identity_rejected", {
            "fields": {e.field: getattr(body, e.field) for e in errors},
            "session": {"user_id": state.user_id, "agent_id": state.agent_id},
            "role": body.role})
        # The session's events record each; the log says it once per interval, since a
        # misbehaving client repeats it (1,000 lines for 1,000 turns: a day-2 probe).
        if (count := _REFUSED_TURN_LINES.due()) is not None:
            log.warning("session %s: turn refused, %s (%d turn(s) refused for another "
                        "identity since the last report)", session_id,
                        ", ".join(e.field for e in errors), count)
        return IdentityRejected(errors)

    async def append(self, state: SessionState, body: TurnCreate) -> AppendedTurn:
        """Append `body` to the session `admit` locked."""
        turn = await self.repository.append(state, body.role, body.content, body.user_id,
                                            body.agent_id, estimate_tokens(body.content))
        state = await self._settle_folds(replace(state, turns=turn.seq))
        return AppendedTurn(**_turn(turn).model_dump(), session_id=state.session_id,
                            warning=fold_warning(state, self.folds))

    async def _settle_folds(self, state: SessionState, *, switched: bool = False) -> SessionState:
        """Flag and queue the fold when one is due, in the transaction that locked `state`;
        while the summariser is degraded (or the session has just switched to
        `rolling_summary`), first drop the folds past the backlog's bound.

        Not while it is healthy: a burst of appends (a transcript imported) outruns any
        summariser for a while, and dropping then lost turns from the summary for nothing;
        under a steady stream each drop moved the cursor under the fold in flight, which
        was then discarded, so nothing was ever summarised (1,252 turns dropped, 0
        summarised, in a probe)."""
        if state.strategy != "rolling_summary":
            return state
        bounded = switched or state.health.state == "degraded"
        dropped = overflow(state.turns, state.cursor, self.folds) if bounded else []
        if dropped:
            # One event for them all: one a fold flooded the bounded event log (a switch
            # of a 1,100-turn session left only these, its own `strategy_changed` pushed
            # out) and took a statement pair each (a 40k-turn session's switch: 22 s).
            cursor = dropped[-1].last
            await self.repository.add_event(state.session_id, "backlog_overflow", {
                "first_turn": dropped[0].first, "last_turn": cursor,
                "folds": len(dropped), "backlog_max": self.folds.backlog_max,
                "health": state.health.state})
            await self.repository.drop_folds(state.session_id, cursor,
                                             cursor - state.cursor)
            log.warning("session %s: fold backlog full, turns %d-%d left the context "
                        "unsummarised", state.session_id, dropped[0].first, cursor)
            state = replace(state, cursor=cursor,
                            dropped=state.dropped + cursor - state.cursor)
        if backlog(state.turns, state.cursor, self.folds):
            if state.fold_due_since is None:
                await self.repository.mark_fold_due(state.session_id)
            await enqueue_fold(self._db, self.repository.tenant_id, state.session_id)
        return state

    async def configure(self, session_id: str, config: SessionConfig) -> tuple[bool, Session]:
        """Create the session with `config`, or change an existing one's strategy; whether it
        was created, and the session.

        A session switched to `rolling_summary` starts folding from its cursor: past the
        backlog's bound its oldest turns are dropped from the context, as when a degraded
        summariser's backlog overflows (with the same events); the rest are folded.
        """
        state, created = await self.repository.lock_or_create(session_id, config.strategy)
        switched = state.strategy != config.strategy
        if switched:
            await self.repository.set_strategy(session_id, config.strategy)
            await self.repository.add_event(session_id, "strategy_changed", {
                "from": state.strategy, "to": config.strategy})
            log.info("session %s: strategy %s -> %s", session_id, state.strategy,
                     config.strategy)
            state = replace(state, strategy=config.strategy)
        await self._settle_folds(state, switched=switched)
        # Read again (the row is locked by this transaction): settling may have moved the
        # cursor and flagged a fold, and the switch stamped updated_at.
        final = await self.repository.get(session_id)
        if final is None:
            raise LookupError(f"session {session_id!r} vanished while locked")
        return created, session_answer(final, self.folds, self.retention)

    async def delete(self, session_id: str) -> None:
        if not await self.repository.delete(session_id):
            raise NotFound(f"session {session_id!r} not found")
        await self._erase_answers([session_id])
        log.info("session %s deleted", session_id)

    async def _erase_answers(self, session_ids: Sequence[str]) -> None:
        """The stored answers of keyed appends to these sessions, which quote their turns:
        a retry with the key served a deleted turn's text back (a day-2 probe)."""
        await erase_answers(self.repository.session, self.repository.tenant_id,
                            named_sessions(session_ids))

    async def delete_of(self, *, user_id: str | None, agent_id: str | None) -> int:
        """Delete every session of a user, an agent, or that user with that agent; how
        many. Naming neither is refused: it would delete the tenant's every session."""
        if user_id is None and agent_id is None:
            raise ValidationFailed.on("query", "name user_id, agent_id or both: without "
                                      "one the delete would remove every session of the "
                                      "tenant")
        deleted_ids = await self.repository.delete_of(user_id=user_id, agent_id=agent_id)
        deleted = len(deleted_ids)
        await self._erase_answers(deleted_ids)
        # By which ids, not the ids: the user's is what was erased.
        log.info("deleted %d sessions of tenant %s by %s", deleted, self.repository.tenant_id,
                 " and ".join(n for n, v in (("user_id", user_id), ("agent_id", agent_id))
                              if v is not None))
        return deleted


class SessionReads:
    """The read endpoints: each statement on its own, outside any transaction. A context
    is read as two statements (the session, then its turns up to the session's count as
    read), so turns appended between them are not in it, and a fold saved between them
    leaves the summary and cursor that were read: the answer is the session as it was."""

    def __init__(self, reader: SessionReader, *, folds: FoldPolicy, budget_tokens: int,
                 retention: timedelta | None = None) -> None:
        self.reader = reader
        self.folds = folds
        self.budget_tokens = budget_tokens
        self.retention = retention

    async def _state(self, session_id: str) -> SessionState:
        state = await self.reader.get(session_id)
        if state is None:
            raise NotFound(f"session {session_id!r} not found")
        return state

    async def get(self, session_id: str) -> Session:
        return session_answer(await self._state(session_id), self.folds, self.retention)

    async def list(self, filters: SessionFilter, limit: int, cursor: str | None) -> SessionPage:
        of = listing("sessions", self.reader.tenant_id, filters)
        after = decode_text_cursor(cursor, of) if cursor else None
        page, next_cursor = cut_page(await self.reader.list(filters, limit + 1, after),
                                     limit, lambda s: (s.created_at, s.session_id), of)
        return SessionPage(items=[session_answer(s, self.folds, self.retention) for s in page],
                           next_cursor=next_cursor)

    async def context(self, session_id: str, budget_tokens: int | None = None) -> SessionContext:
        budget = budget_tokens if budget_tokens is not None else self.budget_tokens
        state = await self._state(session_id)
        strategy = strategy_in_force(state)
        after = strategy.reads_after(state)
        turns = ([] if after is None else await self.reader.newest_turns(
            session_id, after, state.turns, CONTEXT_MAX_TURNS))
        parts = strategy.build(state, turns, budget)
        return SessionContext(
            session_id=session_id, strategy=state.strategy, mode=parts.mode,
            summary=parts.summary, turns=[_turn(t) for t in parts.turns],
            omitted_turns=parts.omitted, tokens=parts.tokens,
            budget_tokens=budget, warning=fold_warning(state, self.folds),
            health=_health(state))

    async def turns(self, session_id: str, limit: int, cursor: str | None) -> TurnPage:
        """The log, newest first: every turn, folded, dropped or not."""
        of = listing("turns", self.reader.tenant_id, session_id)
        before = decode_number_cursor(cursor, of) if cursor else None
        await self._state(session_id)
        page, next_cursor = cut_page(
            await self.reader.turns_before(session_id, before, limit + 1), limit,
            lambda t: (t.created_at, str(t.seq)), of)
        return TurnPage(items=[_turn(t) for t in page], next_cursor=next_cursor)

    async def events(self, session_id: str, limit: int, cursor: str | None) -> SessionEventPage:
        of = listing("events", self.reader.tenant_id, session_id)
        after = decode_cursor(cursor, of) if cursor else None
        await self._state(session_id)
        page, next_cursor = cut_page(await self.reader.events(session_id, limit + 1, after),
                                     limit, lambda e: (e["created_at"], e["id"]), of)
        return SessionEventPage(items=[SessionEventItem(**e) for e in page],
                                next_cursor=next_cursor)
