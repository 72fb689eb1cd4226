"""The full-text index keyed by tenant/category as well.

A search filtered by categories found a large scope's rare-term rows through
ix_memories_tsv_scope keyed by the tenant (and user), then read every row to check its
category: for a category of 17% of a 100k-row tenant, ~2,800 rows read for 500 kept,
3 ms of the statement. With "<tenant>/<category>" as one more key column, GIN intersects
each category's postings with the rare terms' before any row is read, as migration 0011
does for tags (the statement 7.9-8.9 -> 3.1-3.5 ms p50, bench/search_filters.py). A row
has one category, so the index holds one more entry per row (5.7 -> 5.9 MB at 100k, no
write cost measurable); a search without categories does not read them.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "CREATE INDEX ix_memories_tsv_scope ON memories USING gin ({columns})"
TENANT_USER = "(tenant_id::text), ((tenant_id::text || '/') || user_id)"


def upgrade() -> None:
    op.drop_index("ix_memories_tsv_scope", table_name="memories")
    op.execute(INDEX.format(
        columns=f"{TENANT_USER}, ((tenant_id::text || '/') || category), tsv"))


def downgrade() -> None:
    op.drop_index("ix_memories_tsv_scope", table_name="memories")
    op.execute(INDEX.format(columns=f"{TENANT_USER}, tsv"))
