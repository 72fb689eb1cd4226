"""Idempotency records: the first answer to a keyed create, replayed to its retries."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, Integer, LargeBinary, String, Text, func
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base


class IdempotencyRecord(Base):
    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("ix_idempotency_keys_created_at", "created_at"),
                      Index("ix_idempotency_keys_names", "names", postgresql_using="gin"))

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    # Which operation and body the key was first used with: same key, other body is a 409.
    operation: Mapped[str] = mapped_column(String(64))
    request_hash: Mapped[bytes] = mapped_column(LargeBinary(32))
    status_code: Mapped[int | None] = mapped_column(Integer)
    # The first answer's JSON text as sent, so a retry gets the same bytes (jsonb would
    # reorder its keys; migration 0014).
    response_body: Mapped[str | None] = mapped_column(Text)
    # What the answer names (`memory:<id>`, `session:<id>`): erasing one erases the
    # answer too (migration 0034).
    names: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
