"""A tenant may have its own request rate (`python -m app tenants limit`), which
overrides the service's `ENGRAM_TENANT_RATE_LIMIT`. NULL: the service's default.

Nullable columns without a default: PostgreSQL adds them without rewriting the table,
and the checks are validated over the few rows tenants has.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("rate_limit_per_second", sa.Double(), nullable=True))
    op.add_column("tenants", sa.Column("rate_limit_burst", sa.Integer(), nullable=True))
    op.create_check_constraint(op.f("ck_tenants_rate_limit_valid"), "tenants",
                               "rate_limit_per_second >= 0")
    op.create_check_constraint(op.f("ck_tenants_rate_burst_valid"), "tenants",
                               "rate_limit_burst >= 0")


def downgrade() -> None:
    op.drop_constraint(op.f("ck_tenants_rate_burst_valid"), "tenants", type_="check")
    op.drop_constraint(op.f("ck_tenants_rate_limit_valid"), "tenants", type_="check")
    op.drop_column("tenants", "rate_limit_burst")
    op.drop_column("tenants", "rate_limit_per_second")
