"""Each consolidation run records the X-Request-ID it ran under (the request that
started it; for an automatic run, its job's id), so an operator reading a failed run
finds its log lines. Runs from before this revision have none.

A nullable column without a default: PostgreSQL adds it without rewriting the table.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("consolidation_runs", sa.Column("request_id", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("consolidation_runs", "request_id")
