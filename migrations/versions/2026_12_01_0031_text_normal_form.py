"""The full-text vector indexes a memory's text in Unicode's compatibility normal form.

The same word reaches the service in several spellings: composed or decomposed accents
("Zoë" from a Mac's file names is Z, o, e and a combining diaeresis), ligatures from a
PDF's copied text ("ﬁnance"), full-width letters from CJK input methods. PostgreSQL's
parser reads each as other letters, so a question typed the usual way matched none of
them by full text (an exploratory probe: "finance" found nothing of "ﬁnance"). The
trigger now indexes NFKC of the content (the content itself is stored as sent), and the
search normalises its query the same way (app/search/repository.py). Only rows whose text
NFKC changes are indexed again: each takes one new version of its row, history untouched
(the trigger fires on covered_days, which the history does not track), and the term
statistics follow through their own triggers.

NFKC needs a UTF8 database (PostgreSQL's normalize()); on another encoding the function
stays as it was.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from app.migrate import revision_module

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CONTENT = "to_tsvector('english', NEW.content)"
_NORMAL = ("to_tsvector('english', CASE WHEN NEW.content IS NFKC NORMALIZED THEN NEW.content"
           " ELSE normalize(NEW.content, NFKC) END)")
REINDEX = ("UPDATE memories SET covered_days = covered_days "
           "WHERE content IS NOT NFKC NORMALIZED")


def _utf8() -> bool:
    encoding = op.get_bind().exec_driver_sql("SHOW server_encoding").scalar()
    return str(encoding).upper() in {"UTF8", "UTF-8"}


def upgrade() -> None:
    if not _utf8():
        return
    previous = revision_module("0010").TSV_FUNCTION
    assert _CONTENT in previous
    op.execute(previous.replace(_CONTENT, _NORMAL))
    op.execute(REINDEX)


def downgrade() -> None:
    if not _utf8():
        return
    op.execute(revision_module("0010").TSV_FUNCTION)
    op.execute(REINDEX)
