"""A cap on each user's active memories (`ENGRAM_MAX_MEMORIES_PER_USER`, a tenant's own
through `python -m app tenants limit --memories-per-user`): the tenant's column, and the
indexes a write past the cap finds its victims through.

One holds only active rows of users, in eviction order (least important, then oldest), so
a user at the cap loses its first entries without a sort over its rows; the other a
user's active rows that expire, which go first, without reading every tenant's expired
rows. Both are built inside the migration's transaction, as the earlier indexes were:
writes to `memories` wait while they are built (~0.3 s at 100k rows here).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("max_memories_per_user", sa.Integer(), nullable=True))
    op.create_check_constraint(op.f("ck_tenants_max_memories_per_user_valid"), "tenants",
                               "max_memories_per_user >= 0")
    op.create_index("ix_memories_tenant_user_evict", "memories",
                    ["tenant_id", "user_id", "importance", "created_at", "id"],
                    postgresql_where=sa.text("archived_at IS NULL AND user_id IS NOT NULL"))
    op.create_index("ix_memories_tenant_user_expiring", "memories",
                    ["tenant_id", "user_id", "expires_at"],
                    postgresql_where=sa.text("expires_at IS NOT NULL AND archived_at IS NULL "
                                             "AND user_id IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_memories_tenant_user_expiring", table_name="memories")
    op.drop_index("ix_memories_tenant_user_evict", table_name="memories")
    op.drop_constraint(op.f("ck_tenants_max_memories_per_user_valid"), "tenants",
                       type_="check")
    op.drop_column("tenants", "max_memories_per_user")
