"""Tags and categories stored composed (Unicode NFC), as the API now writes and filters
them (app/validation.py, `label_form`).

"café" with a combining accent, as a Mac's file names write it, had been another tag than
"café" composed: a tag filter, a delete by tag, or the tags a summary takes from every
source it stands for missed it (an exploratory probe). The rows stored before are
composed here, and the states their history keeps, a tag list keeping the first of the
spellings it held twice. No history is written for it (the spelling changes, not what a
client set), and the term statistics follow through their own triggers. A label that
composing would take past its 100 characters (a few Indic letters come apart) is left as
it was, as the API keeps it.

NFC needs a UTF8 database (PostgreSQL's normalize()); on another encoding nothing changes.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from app.migrate import utf8_encoded

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A label composed, unless composing takes it past the 100 characters the API allows (a
# few Indic letters come apart): app/validation.py's `label_form`, in SQL.
_LABEL = ("CASE WHEN length(normalize({v}, NFC)) <= 100 THEN normalize({v}, NFC) "
          "ELSE {v} END")
_TAGS = """ARRAY(
        SELECT f.tag FROM (
            SELECT {label} AS tag, min(u.place) AS place
            FROM unnest({{table}}.tags) WITH ORDINALITY AS u(tag, place)
            GROUP BY 1) f
        ORDER BY f.place)""".format(label=_LABEL.format(v="u.tag"))
_DECOMPOSED = ("{table}.category IS NOT NFC NORMALIZED OR EXISTS "
               "(SELECT 1 FROM unnest({table}.tags) AS t(tag) WHERE t.tag IS NOT NFC NORMALIZED)")
# The rows, and the states their history keeps: a revert compares a summary's row with
# its versions, and a version left decomposed read as an edit since the run (a re-probe).
COMPOSE = [
    f"UPDATE {table} SET tags = {_TAGS.format(table=table)}, "
    f"category = {_LABEL.format(v=f'{table}.category')} "
    f"WHERE {_DECOMPOSED.format(table=table)}"
    for table in ("memories", "memory_versions")
]


def upgrade() -> None:
    if not utf8_encoded(op.get_bind()):
        return
    op.execute("ALTER TABLE memories DISABLE TRIGGER memories_history")
    for statement in COMPOSE:
        op.execute(statement)
    op.execute("ALTER TABLE memories ENABLE TRIGGER memories_history")


def downgrade() -> None:
    # The decomposed spellings are not kept: a downgrade leaves the labels composed, which
    # every earlier version reads as any other label.
    pass
