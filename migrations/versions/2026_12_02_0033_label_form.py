"""Tags and categories stored composed (Unicode NFC), as the API now writes and filters
them (app/validation.py, `label_form`).

"café" with a combining accent, as a Mac's file names write it, had been another tag than
"café" composed: a tag filter, a delete by tag, or the tags a summary takes from every
source it stands for missed it (an exploratory probe). The rows stored before are
composed here, a tag list keeping the first of the spellings it held twice. The history
is not written for it (the spelling changes, not what a client set), and the term
statistics follow through their own triggers. A category that composing would take past
its 100 characters (a few Indic letters come apart) is left as it was.

NFC needs a UTF8 database (PostgreSQL's normalize()); on another encoding nothing changes.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COMPOSE = """
UPDATE memories m SET
    tags = ARRAY(
        SELECT f.tag FROM (
            SELECT normalize(u.tag, NFC) AS tag, min(u.place) AS place
            FROM unnest(m.tags) WITH ORDINALITY AS u(tag, place)
            GROUP BY 1) f
        ORDER BY f.place),
    category = CASE WHEN length(normalize(m.category, NFC)) <= 100
                    THEN normalize(m.category, NFC) ELSE m.category END
WHERE m.category IS NOT NFC NORMALIZED
   OR EXISTS (SELECT 1 FROM unnest(m.tags) AS t(tag) WHERE t.tag IS NOT NFC NORMALIZED)
"""


def _utf8() -> bool:
    encoding = op.get_bind().exec_driver_sql("SHOW server_encoding").scalar()
    return str(encoding).upper() in {"UTF8", "UTF-8"}


def upgrade() -> None:
    if not _utf8():
        return
    op.execute("ALTER TABLE memories DISABLE TRIGGER memories_history")
    op.execute(COMPOSE)
    op.execute("ALTER TABLE memories ENABLE TRIGGER memories_history")


def downgrade() -> None:
    # The decomposed spellings are not kept: a downgrade leaves the labels composed, which
    # every earlier version reads as any other label.
    pass
