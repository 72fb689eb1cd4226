"""A memory's earlier states: each change to what a memory says keeps the state it replaced.

A row trigger after UPDATE writes the old row's content, category, tags, importance,
metadata and expiry when any of them changed (not when a consolidation archives or
restores it, which changes none of them). Updates of a memory are serialised by its row
lock, so numbering by max(version) + 1 cannot race. The rows go with their memory (the
foreign key cascades), so deleting a user's memories deletes their past too.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TRACKED = ("content", "category", "tags", "importance", "metadata", "expires_at")


def upgrade() -> None:
    op.create_table(
        "memory_versions",
        sa.Column("tenant_id", postgresql.UUID(), nullable=False),
        sa.Column("memory_id", postgresql.UUID(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("category", sa.String(100), nullable=False),
        sa.Column("tags", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("importance", sa.Float(), nullable=False),
        sa.Column("metadata", postgresql.JSONB(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("replaced_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id", "memory_id"],
                                ["memories.tenant_id", "memories.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("tenant_id", "memory_id", "version"),
    )
    changed = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in TRACKED)
    op.execute(
        "CREATE FUNCTION memories_history() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        "BEGIN\n"
        "  INSERT INTO memory_versions (tenant_id, memory_id, version, content, category,\n"
        "      tags, importance, metadata, expires_at, valid_from, replaced_at)\n"
        "  SELECT OLD.tenant_id, OLD.id, coalesce(max(v.version), 0) + 1, OLD.content,\n"
        "      OLD.category, OLD.tags, OLD.importance, OLD.metadata, OLD.expires_at,\n"
        "      OLD.updated_at, NEW.updated_at\n"
        "    FROM memory_versions v WHERE v.tenant_id = OLD.tenant_id AND v.memory_id = OLD.id;\n"
        "  RETURN NULL;\n"
        "END $$")
    op.execute(f"CREATE TRIGGER memories_history AFTER UPDATE ON memories FOR EACH ROW "
               f"WHEN ({changed}) EXECUTE FUNCTION memories_history()")


def downgrade() -> None:
    op.execute("DROP TRIGGER memories_history ON memories")
    op.execute("DROP FUNCTION memories_history()")
    op.drop_table("memory_versions")
