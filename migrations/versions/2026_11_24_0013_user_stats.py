"""Term statistics count each user's rows too.

A search in a user's scope needs to know how many rows the user holds: under 1,000 its
BM25 statistics are the user's own, past the exact/HNSW crossover its vectors go through
HNSW, and between the two a term's rows in the user's scope are estimated from the
user's share of the tenant. The full-text statement learnt it by reading: up to 1,000 of
the user's rows (to find the scope is not small) and then up to ~4,200 entries of the
user's btree at 100k rows (to count it up to the crossover), 2.2 ms of a 10k-row user's
5.1 ms statement, on the cores the query's embedding runs on at the same time.

The statement triggers that count each tenant's lexemes, tags and categories (migrations
0004, 0009) now count each tenant's active rows per user as well, under the key
' user:<user_id>' (no lexeme starts with a space), and a row whose user changes moves the
count as a change of its tags moves theirs. The search reads the count as it reads its
terms' (a few index entries). Unlike the btree count it holds no archived rows.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from app.migrate import revision_module

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Each changed row's keys: its lexemes, its tags (each once), its category and its user.
_DELTAS = """
    INSERT INTO term_stats (tenant_id, lexeme, df, total_len)
    SELECT c.tenant_id, k.key, sum(c.sign), 0
    FROM changed c CROSS JOIN LATERAL (
        SELECT unnest(tsvector_to_array(c.tsv))
        UNION ALL
        SELECT ' tag:' || t FROM (SELECT DISTINCT unnest(c.tags)) AS d(t)
        UNION ALL
        SELECT ' category:' || c.category WHERE c.category IS NOT NULL
        UNION ALL
        SELECT ' user:' || c.user_id WHERE c.user_id IS NOT NULL
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
    "insert": "SELECT tenant_id, tsv, tags, category, user_id, 1 AS sign FROM new_rows"
              " WHERE archived_at IS NULL",
    "delete": "SELECT tenant_id, tsv, tags, category, user_id, -1 AS sign FROM old_rows"
              " WHERE archived_at IS NULL",
    # Only rows whose text, tags, category, user or archived state changed move the counts.
    "update": """
        SELECT x.tenant_id, x.tsv, x.tags, x.category, x.user_id, x.sign
        FROM old_rows o
        JOIN new_rows n ON n.tenant_id = o.tenant_id AND n.id = o.id
        CROSS JOIN LATERAL (VALUES
            (o.tenant_id, o.tsv, o.tags, o.category, o.user_id, -1, o.archived_at IS NULL),
            (n.tenant_id, n.tsv, n.tags, n.category, n.user_id, 1, n.archived_at IS NULL)
        ) AS x(tenant_id, tsv, tags, category, user_id, sign, active)
        WHERE x.active
          AND (o.tsv IS DISTINCT FROM n.tsv
               OR o.tags IS DISTINCT FROM n.tags
               OR o.category IS DISTINCT FROM n.category
               OR o.user_id IS DISTINCT FROM n.user_id
               OR (o.archived_at IS NULL) <> (n.archived_at IS NULL))
    """,
}

BACKFILL = """
INSERT INTO term_stats (tenant_id, lexeme, df, total_len, folded)
SELECT tenant_id, ' user:' || user_id, count(*), 0, true
FROM memories WHERE archived_at IS NULL AND user_id IS NOT NULL
GROUP BY tenant_id, user_id
"""


def upgrade() -> None:
    previous = revision_module("0009")
    for event, changed in CHANGED.items():
        op.execute(previous.function(event, changed, _DELTAS))
    op.execute(BACKFILL)


def downgrade() -> None:
    # The functions as 0009 wrote them.
    previous = revision_module("0009")
    for event in CHANGED:
        op.execute(previous.function(event, previous.CHANGED[event], previous._DELTAS))
    op.execute("DELETE FROM term_stats WHERE lexeme LIKE ' user:%'")
