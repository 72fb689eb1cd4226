"""Memories' metadata indexed for containment (`@>`), which the listing, the filtered
delete and the search filter by.

A GIN index with jsonb_path_ops: one hashed entry per path to a value, and the one
operator it serves is containment, the only way metadata is filtered. Without it a narrow
filter over a large tenant read the tenant: at 100k rows, the search's scope count and
exact ranking for a value held by 30 rows took ~110 and ~50 ms (bench/search_filters.py).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_memories_metadata", "memories", ["metadata"], postgresql_using="gin",
                    postgresql_ops={"metadata": "jsonb_path_ops"})


def downgrade() -> None:
    op.drop_index("ix_memories_metadata", table_name="memories")
