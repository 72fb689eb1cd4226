"""Memories written per scope, so every N-th write can enqueue an automatic consolidation."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, DateTime, ForeignKey, Text, func
from sqlalchemy.dialects.postgresql import UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base


class ScopeWriteCounter(Base):
    __tablename__ = "scope_write_counters"

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        UUID, ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    # The scope's four fields as a JSON array (nulls included): one row per exact scope.
    scope_key: Mapped[str] = mapped_column(Text, primary_key=True)
    written: Mapped[int] = mapped_column(BigInteger, server_default="0")
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())
