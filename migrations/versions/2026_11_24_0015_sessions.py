"""Sessions: their state, their append-only turn logs and their events.

`sessions` holds one row per (tenant, session id): the identity its first turns gave it,
its context strategy, how many turns it has, the fold cursor with the rolling summary it
belongs to, and the summariser's health. `session_turns` is the log, numbered from 1 per
session; `session_events` records health changes, dropped folds and rejected turns,
newest first per session.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SESSION_FK = (["tenant_id", "session_id"], ["sessions.tenant_id", "sessions.session_id"])


def _timestamp(name: str, *, nullable: bool = False) -> sa.Column[sa.DateTime]:
    default = None if nullable else sa.text("now()")
    return sa.Column(name, sa.DateTime(timezone=True), server_default=default,
                     nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("tenant_id", postgresql.UUID(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=True),
        sa.Column("agent_id", sa.Text(), nullable=True),
        sa.Column("strategy", sa.Text(), nullable=False),
        sa.Column("turn_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("cursor", sa.Integer(), server_default="0", nullable=False),
        sa.Column("dropped_turns", sa.Integer(), server_default="0", nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        _timestamp("summary_updated_at", nullable=True),
        sa.Column("health", sa.Text(), server_default="healthy", nullable=False),
        sa.Column("health_failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("health_successes", sa.Integer(), server_default="0", nullable=False),
        _timestamp("health_changed_at", nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        _timestamp("created_at"),
        _timestamp("updated_at"),
        sa.CheckConstraint("strategy IN ('none', 'truncation', 'rolling_summary')",
                           name=op.f("ck_sessions_strategy_valid")),
        sa.CheckConstraint("health IN ('healthy', 'retry', 'degraded', 'recovering')",
                           name=op.f("ck_sessions_health_valid")),
        sa.CheckConstraint("0 <= cursor AND cursor <= turn_count",
                           name=op.f("ck_sessions_cursor_in_log")),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name=op.f("fk_sessions_tenant_id_tenants")),
        sa.PrimaryKeyConstraint("tenant_id", "session_id", name=op.f("pk_sessions")),
    )
    op.create_index("ix_sessions_unsummarised", "sessions", [sa.text("(turn_count - cursor)")],
                    postgresql_where=sa.text("strategy = 'rolling_summary'"))
    op.create_table(
        "session_turns",
        sa.Column("tenant_id", postgresql.UUID(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.Text(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("user_id", sa.Text(), nullable=True),
        sa.Column("agent_id", sa.Text(), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=False),
        _timestamp("created_at"),
        sa.CheckConstraint("role IN ('user', 'assistant', 'system', 'tool')",
                           name=op.f("ck_session_turns_role_valid")),
        sa.ForeignKeyConstraint(*_SESSION_FK, ondelete="CASCADE",
                                name=op.f("fk_session_turns_tenant_id_session_id_sessions")),
        sa.PrimaryKeyConstraint("tenant_id", "session_id", "seq",
                                name=op.f("pk_session_turns")),
    )
    op.create_table(
        "session_events",
        sa.Column("tenant_id", postgresql.UUID(), nullable=False),
        sa.Column("id", postgresql.UUID(), nullable=False),
        sa.Column("session_id", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("detail", postgresql.JSONB(), server_default="{}", nullable=False),
        _timestamp("created_at"),
        sa.ForeignKeyConstraint(*_SESSION_FK, ondelete="CASCADE",
                                name=op.f("fk_session_events_tenant_id_session_id_sessions")),
        sa.PrimaryKeyConstraint("tenant_id", "id", name=op.f("pk_session_events")),
    )
    op.create_index("ix_session_events_session_created", "session_events",
                    ["tenant_id", "session_id", sa.text("created_at DESC"),
                     sa.text("id DESC")])


def downgrade() -> None:
    op.drop_table("session_events")
    op.drop_table("session_turns")
    op.drop_table("sessions")
