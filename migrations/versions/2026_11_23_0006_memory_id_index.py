"""A unique btree on the memory id alone.

The search's vector statement reads the rows of its two candidate lists one lookup each
(app/search/repository.py), with a generic plan. Through the primary key (tenant_id, id)
the lookup tied, in the planner's costs, with every index led by `tenant_id` (a generic
plan sizes "one tenant" from statistics, and with many small tenants, or before a table's
first ANALYZE, that is a row or two): it took `ix_memories_tenant_category` with the id as
a filter, which reads all of the tenant's index entries for every row looked up. On this
index the lookup is the only match for `id = $n` (the tenant is checked as a filter the
index cannot serve), so the plan cannot depend on the tenant's size. Ids are UUIDv7s the
service generates, so they are unique across tenants already.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_memories_id", "memories", ["id"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_memories_id", table_name="memories")
