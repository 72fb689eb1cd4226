"""The values the session rules pass around: a session's state and its turns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from typing_extensions import TypeAliasType

from app.sessions.health import Health

# Named, so the OpenAPI document has one schema for it and generated clients one enum.
SessionStrategy = TypeAliasType("SessionStrategy", Literal["none", "truncation", "rolling_summary"])
STRATEGY_NAMES: tuple[SessionStrategy, ...] = ("none", "truncation", "rolling_summary")
TurnRole = TypeAliasType("TurnRole", Literal["user", "assistant", "system", "tool"])
ROLES: tuple[TurnRole, ...] = ("user", "assistant", "system", "tool")


@dataclass(frozen=True, slots=True)
class TurnView:
    seq: int
    role: str
    content: str
    tokens: int
    created_at: datetime
    user_id: str | None = None
    agent_id: str | None = None


@dataclass(frozen=True, slots=True)
class SessionState:
    session_id: str
    user_id: str | None
    agent_id: str | None
    strategy: SessionStrategy
    turns: int  # appended so far; the newest turn's seq
    cursor: int  # turns folded into the summary or dropped from it, oldest first
    dropped: int  # of those, turns dropped when the backlog overflowed
    summary: str | None
    summary_updated_at: datetime | None
    health: Health
    last_error: str | None
    health_changed_at: datetime | None
    created_at: datetime
    updated_at: datetime
    fold_due_since: datetime | None = None  # a fold was due when last looked at
