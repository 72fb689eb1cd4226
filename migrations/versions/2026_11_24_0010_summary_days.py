"""A summary knows the days of the memories it covers.

A memory's `created_at` is when it was said; a summary's is when consolidation wrote it,
often long after. The search's date match (a query naming a day lifts the memories of that
day) and the date words in the full-text vector both read the day a row is about, so for
a summary that must be the days of the facts under it, not the day it was written: a
summary of 8 May 2023 written today otherwise never matched "what did we discuss on 8 May
2023" by its date, and matched a question about today instead.

`covered_days`: the distinct UTC days of the facts a summary covers, through summaries of
summaries; empty for a fact. Consolidation fills it when it writes a summary (from the
sources it has locked); this migration fills it for the summaries already stored. The
full-text trigger indexes a summary's days instead of its write date, each word once (a
summary of a whole year adds at most 31 + 12 + 1 lexemes).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from app.migrate import revision_module

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TSV_FUNCTION = """
CREATE OR REPLACE FUNCTION memories_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The day words are rendered in UTC ("8 May 2023") and stemmed like the query text: a
    -- fact's day, a summary's covered days (each day number, month and year once).
    NEW.tsv := setweight(to_tsvector('english', NEW.content), 'A')
        || setweight(to_tsvector('english', CASE
               WHEN cardinality(NEW.covered_days) > 0 THEN array_to_string(ARRAY(
                   SELECT DISTINCT w FROM unnest(NEW.covered_days) AS d(day)
                   CROSS JOIN LATERAL unnest(ARRAY[to_char(d.day, 'FMDD'),
                                                   to_char(d.day, 'FMMonth'),
                                                   to_char(d.day, 'YYYY')]) AS u(w)
                   ORDER BY w), ' ')
               ELSE to_char(NEW.created_at AT TIME ZONE 'UTC', 'FMDD FMMonth YYYY')
           END), 'D');
    RETURN NEW;
END
$$
"""

TRIGGER = ("CREATE TRIGGER memories_tsv BEFORE INSERT OR UPDATE OF {columns} "
           "ON memories FOR EACH ROW EXECUTE FUNCTION memories_tsv()")

# Each summary's leaf facts, through the summaries it covers (UNION: a cycle cannot loop).
BACKFILL = """
WITH RECURSIVE lineage(tenant_id, summary_id, member_id) AS (
    SELECT s.tenant_id, s.id, u.member
    FROM memories s CROSS JOIN LATERAL unnest(s.summary_of) AS u(member)
    WHERE s.fact_role = 'summary'
    UNION
    SELECT l.tenant_id, l.summary_id, u.member
    FROM lineage l
    JOIN memories m ON m.tenant_id = l.tenant_id AND m.id = l.member_id
                   AND m.fact_role = 'summary'
    CROSS JOIN LATERAL unnest(m.summary_of) AS u(member)
),
days AS (
    SELECT l.tenant_id, l.summary_id,
           array_agg(DISTINCT (m.created_at AT TIME ZONE 'UTC')::date
                     ORDER BY (m.created_at AT TIME ZONE 'UTC')::date) AS days
    FROM lineage l
    JOIN memories m ON m.tenant_id = l.tenant_id AND m.id = l.member_id
                   AND m.fact_role = 'fact'
    GROUP BY l.tenant_id, l.summary_id
)
UPDATE memories s SET covered_days = d.days
FROM days d
WHERE s.tenant_id = d.tenant_id AND s.id = d.summary_id
"""


def upgrade() -> None:
    op.add_column("memories", sa.Column("covered_days", postgresql.ARRAY(sa.Date()),
                                        server_default="{}", nullable=False))
    op.execute(TSV_FUNCTION)
    op.execute("DROP TRIGGER memories_tsv ON memories")
    op.execute(TRIGGER.format(columns="content, created_at, covered_days"))
    # Only summaries are updated (the trigger re-indexes their day words), so the vector
    # index takes one new version per summary, not per row.
    op.execute(BACKFILL)


def downgrade() -> None:
    previous = revision_module("0003").TSV_FUNCTION
    op.execute(previous.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    op.execute("DROP TRIGGER memories_tsv ON memories")
    op.execute(TRIGGER.format(columns="content, created_at"))
    # Summaries' day words back to their write date, before the days go.
    op.execute("UPDATE memories SET content = content WHERE cardinality(covered_days) > 0")
    op.drop_column("memories", "covered_days")
