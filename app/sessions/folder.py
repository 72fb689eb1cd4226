"""The fold: the background work that folds a session's oldest turns into its rolling
summary, one due fold at a time, and keeps the summariser's health.

The summariser is called outside any transaction (an LLM may take seconds; appends must
not wait for it). Its answer is saved with the new cursor in one transaction that first
locks the session and checks the cursor has not moved meanwhile (a full backlog drops
folds from under a slow summariser), nor the strategy switched, nor the session been
deleted and begun again; if any did, the answer is discarded and the session read
again. So a turn is folded at most once, and a crash at any point leaves either the old
summary and cursor or the new ones.

Whatever the summariser, the answer saved is at most ENGRAM_SESSION_SUMMARY_MAX_CHARS
characters and the tokens that many characters of English make, shortened only by its
first lines, the oldest; one whose last line alone is past them is a failed fold, so
the turns it was to hold stay past the cursor.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.service.metrics import SESSION_FOLDS
from app.sessions.folding import FoldPolicy, next_fold
from app.sessions.health import Health, HealthPolicy, after_failure, after_success, next_try
from app.sessions.repository import SessionRepository
from app.sessions.summariser import Summariser, SummaryFailed, within_caps
from app.worker.queue import enqueue

log = logging.getLogger("engram.sessions")

FOLD_JOB = "session.fold"
MAX_FOLDS_PER_JOB = 100
"""A job that still has folds due after this many queues itself again (lets others run)."""


def fold_key(tenant_id: uuid.UUID, session_id: str) -> str:
    return f"{FOLD_JOB}:{tenant_id}:{session_id}"


async def enqueue_fold(db: AsyncSession, tenant_id: uuid.UUID, session_id: str) -> None:
    """Queue the session's fold job in the caller's transaction, inside a SAVEPOINT: a
    queue that fails is logged and the caller's write goes on (the sweep queues it later).
    Nothing is added while the session's job is queued or running."""
    try:
        async with db.begin_nested():
            await enqueue(db, FOLD_JOB, {"tenant_id": str(tenant_id), "session_id": session_id},
                          dedupe_key=fold_key(tenant_id, session_id))
    except Exception:
        log.exception("session %s: the fold job could not be queued; the write goes on",
                      session_id)


@dataclass(frozen=True, slots=True)
class FoldOutcome:
    folds: int  # folds saved
    retry_after: timedelta | None  # the summariser failed: try again after this
    more: bool = False  # stopped at MAX_FOLDS_PER_JOB with folds still due


class SessionFolder:
    def __init__(self, maker: async_sessionmaker[AsyncSession], tenant_id: uuid.UUID,
                 session_id: str, *, summariser: Summariser, folds: FoldPolicy,
                 health: HealthPolicy, max_chars: int, max_events: int | None = None) -> None:
        self.maker = maker
        self.tenant_id = tenant_id
        self.session_id = session_id
        self.summariser = summariser
        self.folds = folds
        self.health = health
        self.max_chars = max_chars
        self.max_events = max_events

    def _repository(self, db: AsyncSession) -> SessionRepository:
        return SessionRepository(db, self.tenant_id, max_events=self.max_events)

    async def run(self) -> FoldOutcome:
        """Fold until no fold is due, or the summariser fails once."""
        saved = 0
        for _ in range(MAX_FOLDS_PER_JOB):
            async with self.maker() as db:
                repository = self._repository(db)
                state = await repository.get(self.session_id)
                if state is None:
                    return FoldOutcome(saved, None)
                chunk = (next_fold(state.turns, state.cursor, self.folds)
                         if state.strategy == "rolling_summary" else None)
                if chunk is None:
                    if state.fold_due_since is not None:
                        await self._clear_flag()
                    return FoldOutcome(saved, None)
                turns = await repository.turns_in(self.session_id, chunk)
            # Held to the caps here too, whatever the summariser: the context never cuts a
            # summary, so one past its tokens left no room for the recent turns.
            try:
                summary: str | SummaryFailed = within_caps(
                    await self.summariser.fold(state.summary, turns, self.max_chars),
                    self.max_chars, "summary_too_long")
            except SummaryFailed as exc:
                summary = exc
            async with self.maker.begin() as db:
                repository = self._repository(db)
                locked = await repository.get(self.session_id, lock=True)
                if locked is None or locked.created_at != state.created_at:
                    # The session was deleted, and perhaps begun again under its id, whose
                    # cursor and strategy start as the old one's did: neither these turns
                    # nor the summariser's health are its. Read the session again.
                    SESSION_FOLDS.labels("discarded").inc()
                    continue
                # Folds dropped, or the strategy switched, meanwhile: the answer is not
                # saved, but it still tells the summariser's health. Counted as nothing, a
                # degraded session under a steady stream of turns (each overflow dropping
                # the fold in flight) never recovered while every answer was good.
                moved = (locked.cursor != state.cursor
                         or locked.strategy != state.strategy)
                if isinstance(summary, SummaryFailed):
                    health = after_failure(locked.health, self.health)
                    await repository.save_health(self.session_id, health,
                                                 health.state != locked.health.state,
                                                 str(summary)[:1000])
                elif moved:
                    health = after_success(locked.health, self.health)
                    await repository.save_health(self.session_id, health,
                                                 health.state != locked.health.state)
                else:
                    health = after_success(locked.health, self.health)
                    await repository.save_fold(
                        self.session_id, chunk.last, summary, health,
                        health.state != locked.health.state,
                        more_due=next_fold(locked.turns, chunk.last, self.folds) is not None)
                await self._record(repository, locked.health, health, summary)
            SESSION_FOLDS.labels("failed" if isinstance(summary, SummaryFailed)
                                 else "discarded" if moved else "saved").inc()
            if moved and not isinstance(summary, SummaryFailed):
                continue
            if isinstance(summary, SummaryFailed):
                log.warning("session %s: fold of turns %d-%d failed (%s), health %s",
                            self.session_id, chunk.first, chunk.last, summary,
                            health.state)
                return FoldOutcome(saved, _later_of(next_try(health, self.health),
                                                    summary.retry_after))
            saved += 1
        return FoldOutcome(saved, None, more=True)

    async def _clear_flag(self) -> None:
        """Nothing is due (a flag set before a threshold was raised or the session left
        `rolling_summary`, or by migration 0016): clear it, checking under the lock that no
        append made a fold due meanwhile."""
        async with self.maker.begin() as db:
            repository = self._repository(db)
            locked = await repository.get(self.session_id, lock=True)
            if locked is not None and (
                    locked.strategy != "rolling_summary"
                    or next_fold(locked.turns, locked.cursor, self.folds) is None):
                await repository.clear_fold_due(self.session_id)

    async def _record(self, repository: SessionRepository, before: Health, after: Health,
                      summary: str | SummaryFailed) -> None:
        if before.state == after.state:
            return
        detail: dict[str, object] = {"from": before.state, "to": after.state,
                                     "summariser": self.summariser.name}
        if isinstance(summary, SummaryFailed):
            detail |= {"error": summary.code, "message": summary.detail[:500],
                       "consecutive_failures": after.failures}
        await repository.add_event(self.session_id, "health_changed", detail)
        log.info("session %s: summariser health %s -> %s", self.session_id, before.state,
                 after.state)


LONGEST_ASKED_WAIT = timedelta(hours=1)
"""The longest a provider's Retry-After holds a session's folds back: a fold due waits,
its turns counting toward the backlog's bound, so a day asked for is taken as an hour."""


def _later_of(delay: timedelta, asked_seconds: float | None) -> timedelta:
    """The health policy's delay, or the LLM's Retry-After when longer: a rate-limited
    provider got the next call on the policy's schedule (0.5 s, 1 s, ...) whatever it
    asked."""
    if asked_seconds is None:
        return delay
    # Capped before it is a timedelta: one of 1e14 s is past timedelta's range, and the
    # OverflowError failed the fold job, which then called the provider again at once.
    asked = min(asked_seconds, LONGEST_ASKED_WAIT.total_seconds())
    return max(delay, timedelta(seconds=asked))
