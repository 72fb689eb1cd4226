"""Tenants: the unit of isolation every other row belongs to."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import CheckConstraint, DateTime, Double, Integer, String, func
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base

DEFAULT_TENANT_ID = uuid.UUID("00000000-0000-0000-0000-000000000001")
"""The tenant every call acts as when authentication is disabled; the first migration seeds it."""


class Tenant(Base):
    __tablename__ = "tenants"
    __table_args__ = (
        CheckConstraint("rate_limit_per_second >= 0", name="rate_limit_valid"),
        CheckConstraint("rate_limit_burst >= 0", name="rate_burst_valid"),
        CheckConstraint("max_in_flight >= 0", name="max_in_flight_valid"),
        CheckConstraint("max_memories_per_user >= 0", name="max_memories_per_user_valid"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=func.now()
    )
    # The tenant's own request rate (app/tenants/rate_limit.py); NULL: the service's
    # default. 0: no limit. A NULL burst is one second's worth.
    rate_limit_per_second: Mapped[float | None] = mapped_column(Double, nullable=True)
    rate_limit_burst: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The tenant's own share of the requests in flight (app/tenants/concurrency.py); NULL:
    # the service's default. 0: no bound.
    max_in_flight: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The tenant's own cap on a user's active memories (app/memories/capacity.py); NULL:
    # the service's default. 0: no cap.
    max_memories_per_user: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Set while an operator has suspended the tenant (`tenants suspend`): its keys are
    # refused with 403 `tenant_suspended`, the reason in the answer's detail.
    suspended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                          nullable=True)
    suspended_reason: Mapped[str | None] = mapped_column(String(500), nullable=True)
