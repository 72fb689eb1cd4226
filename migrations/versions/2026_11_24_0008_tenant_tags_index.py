"""Tags indexed per tenant: a GIN index whose keys are "<tenant id>/<tag>".

The search's statements run with generic plans (app/search/reader.py). A tag filter
matched only `ix_memories_tags`, keyed by the tag alone, beside `tenant_id = $1`, which
every tenant-led btree matches; in a table of many tenants a generic plan takes "one
tenant" for a sliver of the table and ANDed that btree's bitmap in: every index entry of
the tenant read, for any tag. Measured at 100k rows in one tenant beside 1,000 five-row
tenants: counting a 30-row tag's rows took 10.4 ms, 8.6 of them in the tenant's btree;
through this index 0.7 ms.

The keys hold the tenant, so a tag's posting list here is one tenant's rows with it, and
the filter through `tenant_tags()` already implies the tenant: the search can leave
`tenant_id = $1` unindexed and this is the one index its tag filter matches. Rows without
tags are left out (`cardinality(tags) > 0`, which the search states). `ix_memories_tags`
stays for the listing and consolidation queries, which plan each statement for its
parameters.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# IMMUTABLE, as an index expression must be: its result depends on its arguments only.
TENANT_TAGS = """
CREATE FUNCTION tenant_tags(tenant uuid, tags text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ARRAY(SELECT tenant::text || '/' || t FROM unnest(tags) AS t)
"""


def upgrade() -> None:
    op.execute(TENANT_TAGS)
    op.execute(
        "CREATE INDEX ix_memories_tenant_tags ON memories USING gin "
        "(tenant_tags(tenant_id, tags)) WHERE cardinality(tags) > 0"
    )


def downgrade() -> None:
    op.drop_index("ix_memories_tenant_tags", table_name="memories")
    op.execute("DROP FUNCTION tenant_tags(uuid, text[])")
