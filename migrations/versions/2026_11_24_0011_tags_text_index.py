"""The per-tenant tag index holds the full-text vector too.

A search filtered by tags and no scope column finds a large tenant's rare-term rows
through the full-text index keyed by tenant, then reads every row to check the tags: for
a tag on 18% of a 100k-row tenant, ~2,700 rows read for 500 kept, 5 ms of a 10 ms
statement (bench/search_filters.py). With `tsv` as a second column of migration 0008's
index, GIN intersects the tag's postings with the rare terms' before any row is read
(500 read for 500 kept, 1.4 ms). A multicolumn GIN index serves its first column alone
as before, so the tag filters of the other statements keep using it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = ("CREATE INDEX ix_memories_tenant_tags ON memories USING gin ({columns}) "
         "WHERE cardinality(tags) > 0")


def upgrade() -> None:
    op.drop_index("ix_memories_tenant_tags", table_name="memories")
    op.execute(INDEX.format(columns="tenant_tags(tenant_id, tags), tsv"))


def downgrade() -> None:
    op.drop_index("ix_memories_tenant_tags", table_name="memories")
    op.execute(INDEX.format(columns="tenant_tags(tenant_id, tags)"))
