"""Sessions: each session's state, its append-only turn log, and its events."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    CheckConstraint,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base


class ChatSession(Base):
    """One row per session: identity, strategy, the fold cursor, summary and health.

    `cursor` counts the oldest turns already folded into `summary` (or dropped from it
    when the backlog overflowed); it moves in the same transaction as the summary. Every
    append updates the row: no index covers a column an append changes, and migration
    0016 leaves 30% of each page free (fillfactor 70), so those updates are HOT.
    """

    __tablename__ = "sessions"
    __table_args__ = (
        CheckConstraint("strategy IN ('none', 'truncation', 'rolling_summary')",
                        name="strategy_valid"),
        CheckConstraint("health IN ('healthy', 'retry', 'degraded', 'recovering')",
                        name="health_valid"),
        CheckConstraint("0 <= cursor AND cursor <= turn_count", name="cursor_in_log"),
        # The sweep's search for sessions with a fold due. Not an index on the turn count:
        # every append changes that, and an indexed column that changes makes PostgreSQL
        # write a new index entry for each append (no HOT update).
        Index("ix_sessions_fold_due", "fold_due_since",
              postgresql_where=text("fold_due_since IS NOT NULL")),
        # Listing, newest first: the tenant's sessions, or one user's. An append writes the
        # user it already has (set once, by the first turn naming it), which keeps HOT.
        Index("ix_sessions_tenant_created", "tenant_id", text("created_at DESC"),
              text("session_id DESC")),
        Index("ix_sessions_tenant_user_created", "tenant_id", "user_id", text("created_at DESC"),
              text("session_id DESC"), postgresql_where=text("user_id IS NOT NULL")),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        UUID, ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    session_id: Mapped[str] = mapped_column(Text, primary_key=True)
    user_id: Mapped[str | None] = mapped_column(Text)
    agent_id: Mapped[str | None] = mapped_column(Text)
    strategy: Mapped[str] = mapped_column(Text)
    turn_count: Mapped[int] = mapped_column(Integer, server_default="0")
    cursor: Mapped[int] = mapped_column(Integer, server_default="0")
    dropped_turns: Mapped[int] = mapped_column(Integer, server_default="0")
    summary: Mapped[str | None] = mapped_column(Text)
    summary_updated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    health: Mapped[str] = mapped_column(Text, server_default="healthy")
    health_failures: Mapped[int] = mapped_column(Integer, server_default="0")
    health_successes: Mapped[int] = mapped_column(Integer, server_default="0")
    health_changed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    # Set by the append that makes a fold due, cleared by the fold that leaves none due.
    fold_due_since: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())


class SessionTurn(Base):
    """A turn of a session's log, numbered from 1; never updated."""

    __tablename__ = "session_turns"
    __table_args__ = (
        ForeignKeyConstraint(["tenant_id", "session_id"],
                             ["sessions.tenant_id", "sessions.session_id"],
                             ondelete="CASCADE"),
        CheckConstraint("role IN ('user', 'assistant', 'system', 'tool')", name="role_valid"),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    session_id: Mapped[str] = mapped_column(Text, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    role: Mapped[str] = mapped_column(Text)
    content: Mapped[str] = mapped_column(Text)
    user_id: Mapped[str | None] = mapped_column(Text)
    agent_id: Mapped[str | None] = mapped_column(Text)
    tokens: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())


class SessionEvent(Base):
    """What happened to a session that an operator must be able to see: health changes,
    dropped folds, rejected turns."""

    __tablename__ = "session_events"
    __table_args__ = (
        ForeignKeyConstraint(["tenant_id", "session_id"],
                             ["sessions.tenant_id", "sessions.session_id"],
                             ondelete="CASCADE"),
        Index("ix_session_events_session_created", "tenant_id", "session_id",
              text("created_at DESC"), text("id DESC")),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    session_id: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(Text)
    detail: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())
