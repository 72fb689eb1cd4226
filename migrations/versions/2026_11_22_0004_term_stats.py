"""Term statistics: BM25's document frequencies, kept by the database as rows change.

Search ranked full-text matches with Okapi BM25 and counted each query term's document
frequency (and the corpus size) on every query. At 100k rows those counts were most of a
search's time. `term_stats` holds them instead, per tenant: one row per lexeme with its
document frequency, and the lexeme '' for the number of active memories and the sum of
their lengths (BM25's N and average document length).

Statement-level triggers on `memories` write the change of every INSERT, UPDATE and
DELETE as *delta rows*, in the writer's transaction: a search's snapshot sees statistics
exactly as consistent as the memories it sees, and nothing is lost when a write rolls
back. Appending (rather than updating one row per lexeme) means two writers of the same
tenant never wait for, or deadlock on, a shared counter. A background fold
(`app/search/term_stats.py`) sums the delta rows into one `folded` row per lexeme every
few seconds, so a lookup reads few rows. Archived memories leave the statistics (search
never returns them); expired ones stay until they are deleted, as the expiry is a time,
not a write.

There is no foreign key to `tenants`: deleting a tenant cascades to its memories, whose
delete trigger writes negative deltas for a tenant that no longer exists; the fold drops
rows whose sum is zero.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# One function per event: each is a single INSERT ... SELECT over its transition tables,
# whose plan PL/pgSQL keeps for the session. (SQLAlchemy sends a list of rows to asyncpg
# as an executemany, so a batch of N memories fires the insert trigger N times: what
# one firing costs is what a write pays.)
_DELTAS = """
    INSERT INTO term_stats (tenant_id, lexeme, df, total_len)
    SELECT c.tenant_id, l.lexeme, sum(c.sign), 0
    FROM changed c CROSS JOIN LATERAL unnest(tsvector_to_array(c.tsv)) AS l(lexeme)
    GROUP BY c.tenant_id, l.lexeme
    HAVING sum(c.sign) <> 0
    UNION ALL
    SELECT c.tenant_id, '', sum(c.sign), sum(c.sign * length(c.tsv))
    FROM changed c
    GROUP BY c.tenant_id
    HAVING sum(c.sign) <> 0 OR sum(c.sign * length(c.tsv)) <> 0
"""

CHANGED = {
    "insert": "SELECT tenant_id, tsv, 1 AS sign FROM new_rows WHERE archived_at IS NULL",
    "delete": "SELECT tenant_id, tsv, -1 AS sign FROM old_rows WHERE archived_at IS NULL",
    # Only rows whose text or archived state changed move the statistics.
    "update": """
        SELECT x.tenant_id, x.tsv, x.sign
        FROM old_rows o
        JOIN new_rows n ON n.tenant_id = o.tenant_id AND n.id = o.id
        CROSS JOIN LATERAL (VALUES
            (o.tenant_id, o.tsv, -1, o.archived_at IS NULL),
            (n.tenant_id, n.tsv, 1, n.archived_at IS NULL)
        ) AS x(tenant_id, tsv, sign, active)
        WHERE x.active
          AND (o.tsv IS DISTINCT FROM n.tsv
               OR (o.archived_at IS NULL) <> (n.archived_at IS NULL))
    """,
}

# A trigger with transition tables fires on one event only.
REFERENCING = {
    "insert": "AFTER INSERT ON memories REFERENCING NEW TABLE AS new_rows",
    "update": "AFTER UPDATE ON memories REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
    "delete": "AFTER DELETE ON memories REFERENCING OLD TABLE AS old_rows",
}


def trigger_function(event: str) -> str:
    return (
        f"CREATE FUNCTION memories_term_stats_{event}() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        f"BEGIN\n    WITH changed AS ({CHANGED[event].strip()})\n{_DELTAS.strip()};\n"
        "    RETURN NULL;\nEND\n$$"
    )


BACKFILL = """
INSERT INTO term_stats (tenant_id, lexeme, df, total_len, folded)
SELECT m.tenant_id, l.lexeme, count(*), 0, true
FROM memories m CROSS JOIN LATERAL unnest(tsvector_to_array(m.tsv)) AS l(lexeme)
WHERE m.archived_at IS NULL
GROUP BY m.tenant_id, l.lexeme
UNION ALL
SELECT tenant_id, '', count(*), sum(length(tsv)), true
FROM memories WHERE archived_at IS NULL
GROUP BY tenant_id
"""


def upgrade() -> None:
    op.create_table(
        "term_stats",
        sa.Column("tenant_id", postgresql.UUID(), nullable=False),
        sa.Column("lexeme", sa.Text(), nullable=False),
        sa.Column("df", sa.BigInteger(), nullable=False),
        sa.Column("total_len", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("folded", sa.Boolean(), server_default="false", nullable=False),
    )
    op.create_index("ix_term_stats_tenant_id_lexeme", "term_stats", ["tenant_id", "lexeme"])
    op.create_index(
        "ix_term_stats_unfolded", "term_stats", ["tenant_id", "lexeme"],
        postgresql_where=sa.text("NOT folded"),
    )
    for event, spec in REFERENCING.items():
        op.execute(trigger_function(event))
        op.execute(
            f"CREATE TRIGGER memories_term_stats_{event} {spec} FOR EACH STATEMENT "
            f"EXECUTE FUNCTION memories_term_stats_{event}()"
        )
    op.execute(BACKFILL)


def downgrade() -> None:
    for event in REFERENCING:
        op.execute(f"DROP TRIGGER memories_term_stats_{event} ON memories")
        op.execute(f"DROP FUNCTION memories_term_stats_{event}()")
    op.drop_index("ix_term_stats_unfolded", table_name="term_stats")
    op.drop_index("ix_term_stats_tenant_id_lexeme", table_name="term_stats")
    op.drop_table("term_stats")
