"""A tenant may have its own share of the requests in flight (`python -m app tenants
limit --in-flight`), which overrides the service's ENGRAM_TENANT_MAX_CONCURRENT_REQUESTS.
NULL: the service's default; 0: no bound.

A nullable column without a default: added without rewriting the table.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("max_in_flight", sa.Integer(), nullable=True))
    op.create_check_constraint(op.f("ck_tenants_max_in_flight_valid"), "tenants",
                               "max_in_flight >= 0")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_tenants_max_in_flight_valid"), "tenants", type_="check")
    op.drop_column("tenants", "max_in_flight")
