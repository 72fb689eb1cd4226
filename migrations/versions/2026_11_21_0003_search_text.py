"""Search text: index the memory's date beside its content; an index for category filters.

The full-text vector was a generated column over `content` alone. Questions about time
("what did we decide on 8 May 2023?") then match nothing lexically; putting the date into
the indexed text measurably helped every retrieval method (measurements.md). A generated
column cannot use to_char (not immutable), so a trigger maintains `tsv` instead.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TSV_FUNCTION = """
CREATE FUNCTION memories_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The date is rendered in UTC ("8 May 2023") and stemmed like the query text.
    NEW.tsv := setweight(to_tsvector('english', NEW.content), 'A')
        || setweight(to_tsvector('english',
               to_char(NEW.created_at AT TIME ZONE 'UTC', 'FMDD FMMonth YYYY')), 'D');
    RETURN NEW;
END
$$
"""


def upgrade() -> None:
    op.drop_index("ix_memories_tsv", table_name="memories")
    op.drop_column("memories", "tsv")
    op.add_column("memories", sa.Column("tsv", postgresql.TSVECTOR(), nullable=True))
    op.execute(TSV_FUNCTION)
    op.execute(
        "CREATE TRIGGER memories_tsv BEFORE INSERT OR UPDATE OF content, created_at "
        "ON memories FOR EACH ROW EXECUTE FUNCTION memories_tsv()"
    )
    # Every updated row gets a new version in every index; through HNSW that is one graph
    # insert per row (minutes at 100k rows), so the vector index is rebuilt instead.
    op.drop_index("ix_memories_embedding_hnsw", table_name="memories")
    op.execute(
        "UPDATE memories SET tsv = setweight(to_tsvector('english', content), 'A') || "
        "setweight(to_tsvector('english', to_char(created_at AT TIME ZONE 'UTC', "
        "'FMDD FMMonth YYYY')), 'D')"
    )
    op.create_index(
        "ix_memories_embedding_hnsw", "memories", ["embedding"],
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"embedding": "halfvec_cosine_ops"},
        postgresql_where=sa.text("archived_at IS NULL"),
    )
    op.alter_column("memories", "tsv", nullable=False)
    op.create_index("ix_memories_tsv", "memories", ["tsv"], postgresql_using="gin")
    op.create_index("ix_memories_tenant_category", "memories", ["tenant_id", "category"])


def downgrade() -> None:
    op.drop_index("ix_memories_tenant_category", table_name="memories")
    op.drop_index("ix_memories_tsv", table_name="memories")
    op.execute("DROP TRIGGER memories_tsv ON memories")
    op.execute("DROP FUNCTION memories_tsv()")
    op.drop_column("memories", "tsv")
    op.add_column(
        "memories",
        sa.Column("tsv", postgresql.TSVECTOR(),
                  sa.Computed("to_tsvector('english'::regconfig, content)", persisted=True),
                  nullable=False),
    )
    op.create_index("ix_memories_tsv", "memories", ["tsv"], postgresql_using="gin")
