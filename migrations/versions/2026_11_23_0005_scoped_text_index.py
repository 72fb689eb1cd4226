"""The full-text index keyed by tenant and user as well as by lexeme.

A large scope's BM25 list finds its rows on GIN through the query's rarest terms
(app/search/repository.py). With the GIN index on `tsv` alone, the bitmap held every
tenant's and every user's rows with those terms, and the heap visit threw the others
away: for a user holding a tenth of a 100k-row tenant, ~90% of the rows read (7.7 ms
p50 of the statement), and in a table of many tenants, a term rare in one tenant but
common in others would build a bitmap over all of them. This index (btree_gin for the
scalar keys) holds the tenant and the tenant/user pair beside the lexemes, so GIN
intersects them before the heap is read: 4.0 ms p50 for that user and 3.5 against 4.7
ms over the whole tenant, with the same lists (bench/search.py and the measurement in
the commit that added this).

The keys are expressions (`tenant_id::text`, `tenant_id::text || '/' || user_id`), not
the columns: the search's statements run with generic plans, and a plain `tenant_id =
$1` or `user_id = $2` would also match the scope btrees, which a generic plan prefers
for any scope (it assumes an average one) and which read every row of a large scope.
Only this index matches the expressions. It replaces `ix_memories_tsv`, which nothing
else used.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCOPED_INDEX = (
    "CREATE INDEX ix_memories_tsv_scope ON memories USING gin "
    "((tenant_id::text), ((tenant_id::text || '/') || user_id), tsv)"
)


def upgrade() -> None:
    # A trusted extension (PostgreSQL 13+): the database owner may create it.
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
    op.execute(SCOPED_INDEX)
    op.drop_index("ix_memories_tsv", table_name="memories")


def downgrade() -> None:
    op.create_index("ix_memories_tsv", "memories", ["tsv"], postgresql_using="gin")
    op.drop_index("ix_memories_tsv_scope", table_name="memories")
    # The extension stays: other objects may have come to use it.
