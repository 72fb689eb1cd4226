"""A tenant an operator has suspended (`python -m app tenants suspend NAME`): when, and why.

Two nullable columns, so adding them rewrites nothing.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("suspended_at", sa.DateTime(timezone=True),
                                       nullable=True))
    op.add_column("tenants", sa.Column("suspended_reason", sa.String(500), nullable=True))


def downgrade() -> None:
    op.drop_column("tenants", "suspended_reason")
    op.drop_column("tenants", "suspended_at")
