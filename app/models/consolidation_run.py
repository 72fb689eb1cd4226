"""Consolidation runs: every run's request, plan, progress and outcome."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base

RUN_STATUSES = ("planned", "running", "succeeded", "failed")


class ConsolidationRun(Base):
    __tablename__ = "consolidation_runs"
    __table_args__ = (
        CheckConstraint(
            "status IN ('planned', 'running', 'succeeded', 'failed')", name="status_valid"
        ),
        CheckConstraint("mode IN ('archive', 'synthesize_only')", name="mode_valid"),
        Index("ix_consolidation_runs_tenant_created", "tenant_id", text("created_at DESC"),
              text("id DESC")),
        # The crash sweep reads only the few runs still marked running.
        Index("ix_consolidation_runs_running", "lock_key",
              postgresql_where=text("status = 'running'")),
        # The retention's purge walks the runs that ended before its cutoff (0029).
        Index("ix_consolidation_runs_finished", "finished_at", "tenant_id", "id",
              postgresql_where=text("finished_at IS NOT NULL")),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        UUID, ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    mode: Mapped[str] = mapped_column(String(16))
    dry_run: Mapped[bool] = mapped_column(server_default=text("false"))
    # What triggered it: "api" (a POST) or "auto" (every N writes in a scope).
    trigger: Mapped[str] = mapped_column(String(16), server_default="api")
    # The request as received, defaults filled in; the selector and op it resolved to.
    request: Mapped[dict[str, Any]] = mapped_column(JSONB)
    composition: Mapped[dict[str, Any]] = mapped_column(JSONB)
    groups: Mapped[list[dict[str, Any]]] = mapped_column(JSONB, server_default="[]")
    candidates: Mapped[int] = mapped_column(Integer, server_default="0")
    remainder: Mapped[int] = mapped_column(Integer, server_default="0")
    groups_total: Mapped[int | None] = mapped_column(Integer)
    groups_done: Mapped[int] = mapped_column(Integer, server_default="0")
    consolidated: Mapped[int] = mapped_column(Integer, server_default="0")
    created: Mapped[int] = mapped_column(Integer, server_default="0")
    deleted: Mapped[int] = mapped_column(Integer, server_default="0")
    timings: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default="{}")
    error: Mapped[str | None] = mapped_column(Text)
    # The scope's advisory lock and the backend holding it while the run runs: a run
    # marked running whose holder no longer holds the lock was cut off by a crash.
    lock_key: Mapped[int] = mapped_column(BigInteger)
    lock_pid: Mapped[int | None] = mapped_column(Integer)
    # The X-Request-ID the run was started under (app/service/request_id.py).
    request_id: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    reverted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

