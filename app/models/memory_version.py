"""A memory's earlier states: what a change replaced, written by the memories_history
trigger (migrations 0018, 0027), so an operator can see what an agent believed before."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    DateTime,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base


class MemoryVersion(Base):
    __tablename__ = "memory_versions"
    __table_args__ = (
        # Deleting a memory (one, a scope, a tenant) deletes its past with it.
        ForeignKeyConstraint(["tenant_id", "memory_id"], ["memories.tenant_id", "memories.id"],
                             ondelete="CASCADE"),
        # The retention purge reads the oldest states first (app/maintenance.py).
        Index("ix_memory_versions_replaced_at", "replaced_at"),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    memory_id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    # 1 is the memory as first stored; each change adds the state it replaced.
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    content: Mapped[str] = mapped_column(Text)
    category: Mapped[str] = mapped_column(String(100))
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text))
    importance: Mapped[float] = mapped_column(Float)
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # From the memory's updated_at then, to the change that replaced this state.
    valid_from: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    replaced_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
