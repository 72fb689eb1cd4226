"""Term statistics count each tenant's tags and categories too.

The search ranks a scope exactly or through HNSW by an upper bound of the scope's rows
(app/search/vector_path.py). A scope column's rows are counted on its btree; a tag's or a
category's were not (a GIN index cannot count without reading the rows), so a filter on a
tag held by 1.5% of a 100k-row tenant went through HNSW, whose filtered scan visits about
`kv / share` index tuples: 11-13 ms, where the exact ranking of those rows takes 2.

The same statement triggers that keep BM25's document frequencies (migration 0004) now
also count, per tenant, the active rows holding each tag and each category, as keys no
lexeme can be: ' tag:<tag>' and ' category:<category>' (a lexeme never starts with a
space). The search reads them as BM25 reads its terms, a few index entries, in the same
snapshot as the rows. A row whose tags or category change moves the counts as a change of
its text moves the lexemes'.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from app.migrate import revision_module

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Each changed row's keys: its lexemes, its tags (each once) and its category.
_DELTAS = """
    INSERT INTO term_stats (tenant_id, lexeme, df, total_len)
    SELECT c.tenant_id, k.key, sum(c.sign), 0
    FROM changed c CROSS JOIN LATERAL (
        SELECT unnest(tsvector_to_array(c.tsv))
        UNION ALL
        SELECT ' tag:' || t FROM (SELECT DISTINCT unnest(c.tags)) AS d(t)
        UNION ALL
        SELECT ' category:' || c.category WHERE c.category IS NOT NULL
    ) AS k(key)
    GROUP BY c.tenant_id, k.key
    HAVING sum(c.sign) <> 0
    UNION ALL
    SELECT c.tenant_id, '', sum(c.sign), sum(c.sign * length(c.tsv))
    FROM changed c
    GROUP BY c.tenant_id
    HAVING sum(c.sign) <> 0 OR sum(c.sign * length(c.tsv)) <> 0
"""

CHANGED = {
    "insert": "SELECT tenant_id, tsv, tags, category, 1 AS sign FROM new_rows"
              " WHERE archived_at IS NULL",
    "delete": "SELECT tenant_id, tsv, tags, category, -1 AS sign FROM old_rows"
              " WHERE archived_at IS NULL",
    # Only rows whose text, tags, category or archived state changed move the counts.
    "update": """
        SELECT x.tenant_id, x.tsv, x.tags, x.category, x.sign
        FROM old_rows o
        JOIN new_rows n ON n.tenant_id = o.tenant_id AND n.id = o.id
        CROSS JOIN LATERAL (VALUES
            (o.tenant_id, o.tsv, o.tags, o.category, -1, o.archived_at IS NULL),
            (n.tenant_id, n.tsv, n.tags, n.category, 1, n.archived_at IS NULL)
        ) AS x(tenant_id, tsv, tags, category, sign, active)
        WHERE x.active
          AND (o.tsv IS DISTINCT FROM n.tsv
               OR o.tags IS DISTINCT FROM n.tags
               OR o.category IS DISTINCT FROM n.category
               OR (o.archived_at IS NULL) <> (n.archived_at IS NULL))
    """,
}

BACKFILL = """
INSERT INTO term_stats (tenant_id, lexeme, df, total_len, folded)
SELECT m.tenant_id, ' tag:' || d.t, count(*), 0, true
FROM memories m CROSS JOIN LATERAL (SELECT DISTINCT unnest(m.tags)) AS d(t)
WHERE m.archived_at IS NULL
GROUP BY m.tenant_id, d.t
UNION ALL
SELECT tenant_id, ' category:' || category, count(*), 0, true
FROM memories WHERE archived_at IS NULL AND category IS NOT NULL
GROUP BY tenant_id, category
"""


def function(event: str, changed: str, deltas: str) -> str:
    """Migration 0004's trigger function for `event`, with another body."""
    return (
        f"CREATE OR REPLACE FUNCTION memories_term_stats_{event}() RETURNS trigger "
        f"LANGUAGE plpgsql AS $$\nBEGIN\n    WITH changed AS ({changed.strip()})\n"
        f"{deltas.strip()};\n    RETURN NULL;\nEND\n$$"
    )


def upgrade() -> None:
    for event, changed in CHANGED.items():
        op.execute(function(event, changed, _DELTAS))
    op.execute(BACKFILL)


def downgrade() -> None:
    # The functions as 0004 wrote them.
    previous = revision_module("0004")
    for event in CHANGED:
        op.execute(function(event, previous.CHANGED[event], previous._DELTAS))
    op.execute("DELETE FROM term_stats WHERE lexeme LIKE ' %'")
