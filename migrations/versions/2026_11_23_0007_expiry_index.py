"""A partial btree on `expires_at`, for deleting expired memories.

Expired memories were never deleted: no read returns them, but they stayed in the HNSW
and full-text indexes (a search read past them) and in BM25's term statistics. The
service's maintenance now deletes them every few minutes (app/maintenance.py); this index
holds only the rows that have an expiry, so finding the expired ones reads none of the
rows that never expire.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_memories_expires_at", "memories", ["expires_at"],
                    postgresql_where=sa.text("expires_at IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_memories_expires_at", table_name="memories")
