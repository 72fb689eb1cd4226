"""Request and response bodies of the session endpoints."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.sessions.health import SessionHealthState
from app.sessions.types import SessionStrategy, TurnRole
from app.validation import Content, ScopeId


class TurnCreate(BaseModel):
    """One turn to append to the session's log. The first turn that names a user or an
    agent gives the session that identity; a later turn naming another is refused (409)
    and recorded as an event."""

    model_config = ConfigDict(extra="forbid")

    role: TurnRole
    content: Content
    user_id: ScopeId | None = None
    agent_id: ScopeId | None = None


class SessionConfig(BaseModel):
    """How a session builds its context. Without one, a session's first turn creates it
    with the service's default strategy (ENGRAM_SESSION_STRATEGY)."""

    model_config = ConfigDict(extra="forbid")

    strategy: SessionStrategy = Field(description=(
        "`none`: turns are stored, the context is empty; `truncation`: the newest turns "
        "that fit the budget; `rolling_summary`: a summary of the older turns, kept in the "
        "background, and the newest ones. Switching to `rolling_summary` folds the log "
        "from the cursor; past the backlog's bound the oldest turns leave the context "
        "unsummarised (a `backlog_overflow` event)."))


class Turn(BaseModel):
    seq: int = Field(description="The turn's place in the session's log, from 1.")
    role: TurnRole
    content: str
    user_id: str | None
    agent_id: str | None
    tokens: int = Field(description="Estimated tokens (4 ASCII characters each, 1 for any "
                                    "other character).")
    created_at: datetime


class TurnPage(BaseModel):
    items: list[Turn]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to read the next page; null on the last page.")


class AppendedTurn(Turn):
    session_id: str
    warning: str | None = Field(description=(
        "Set when the session's oldest turns are about to be summarised: store anything "
        "critical from them as a memory first."))


class SessionHealth(BaseModel):
    state: SessionHealthState = Field(description=(
        "The rolling summariser's health: healthy -> retry -> degraded -> recovering -> "
        "healthy. While degraded the context falls back to truncation."))
    consecutive_failures: int
    last_error: str | None
    changed_at: datetime | None


class SessionCounts(BaseModel):
    turns: int = Field(description="Turns in the log.")
    unsummarised: int = Field(description="Turns past the cursor: not folded into the summary.")
    summarised: int = Field(description="Turns folded into the rolling summary.")
    dropped: int = Field(description=(
        "Turns that left the context unsummarised because the fold backlog overflowed "
        "(still in the log)."))


class SessionBacklog(BaseModel):
    due: int = Field(description="Folds due and not done yet.")
    max: int = Field(description="Folds kept waiting before the oldest is dropped.")


class Session(BaseModel):
    session_id: str
    user_id: str | None
    agent_id: str | None
    strategy: SessionStrategy
    cursor: int = Field(description="Turns of the log (oldest first) already folded into "
                                    "the summary or dropped from it.")
    counts: SessionCounts
    backlog: SessionBacklog
    health: SessionHealth
    summary_updated_at: datetime | None
    created_at: datetime
    updated_at: datetime = Field(description="The last append or strategy change.")
    expires_at: datetime | None = Field(description=(
        "When the maintenance round may delete the session if nothing is appended before: "
        "`updated_at` plus ENGRAM_SESSION_RETENTION_DAYS; null when sessions are kept."))


class SessionPage(BaseModel):
    items: list[Session]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to read the next page; null on the last page.")


class SessionContext(BaseModel):
    session_id: str
    strategy: SessionStrategy
    mode: SessionStrategy = Field(description=(
        "The strategy in force: `truncation` while a rolling summary's summariser is "
        "degraded."))
    summary: str | None
    turns: list[Turn] = Field(description="The newest turns that fit the budget, oldest first.")
    omitted_turns: int = Field(description=(
        "Turns the strategy would show that did not fit the budget, or lay past the "
        "newest 1,000 turns a context is built from (all older than `turns`)."))
    tokens: int = Field(description=(
        "Estimated tokens of the summary and turns. Above `budget_tokens` only when the "
        "rolling summary alone is: it is never cut (ENGRAM_SESSION_SUMMARY_MAX_CHARS "
        "bounds it), and no turn is added."))
    budget_tokens: int
    warning: str | None
    health: SessionHealth


class SessionEventItem(BaseModel):
    id: uuid.UUID
    kind: str = Field(description=(
        "health_changed, backlog_overflow, identity_rejected or strategy_changed."))
    detail: dict[str, Any]
    created_at: datetime


class SessionEventPage(BaseModel):
    items: list[SessionEventItem]
    next_cursor: str | None = Field(
        description="Pass as `cursor` to read the next page; null on the last page.")


class SessionDeletion(BaseModel):
    deleted: int = Field(description="Sessions deleted, each with its turns, summary and "
                                     "events.")
