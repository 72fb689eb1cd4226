"""The full-text vectors index a memory's text folded as Unicode folds case, without the
characters that are never shown.

PostgreSQL's parser lowers a word's letters one by one: a capital sigma becomes the
medial one, never the final (so "ΚΩΣΤΑΣ" never matched "Κωστας"), and a sharp s stays
one letter (so "GROSSSTRASSE" never matched "Großstraße"). And it keeps a soft hyphen, a
zero-width space, joiner or non-joiner, a word joiner or a byte-order mark inside the
word it stands in, which text copied from web pages holds: "pass\u00adword" was a word of
its own, which "password" never matched (an exploratory probe). `engram_text_form()` is the text the
parser reads, of the content (the trigger) and of the query (app/search/repository.py,
in SQL, so both are normalised by the same Unicode tables: the query had been by
Python's, a version older than PostgreSQL 18's, and a word of the letters Unicode 16 added
did not match itself): NFKC as since migration 0031, the final sigma as the other, the
sharp s (small and capital) as ss, the invisible characters dropped. The content itself is
stored as sent. Only rows whose indexed text changes are indexed again: each takes one
new version of its row, history untouched, the term statistics following through their
own triggers.

On a database whose encoding is not UTF8 the text is read as sent, as before.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from app.migrate import revision_module, utf8_encoded

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NFKC = "CASE WHEN {t} IS NFKC NORMALIZED THEN {t} ELSE normalize({t}, NFKC) END"

# The letters are written as escapes for the reader's sake (a final sigma, a sigma, the
# small and capital sharp s); PostgreSQL's regular expressions read \uXXXX themselves.
FOLD_UTF8 = (
    "CREATE OR REPLACE FUNCTION engram_text_form(t text) RETURNS text\n"
    "LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$\n"
    "    SELECT regexp_replace(\n"
    f"        replace(replace(translate({_NFKC.format(t='t')}, '\u03c2', '\u03c3'),\n"
    "                        '\u00df', 'ss'), '\u1e9e', 'ss'),\n"
    "        '[\\u00ad\\u200b-\\u200d\\u2060\\ufeff]', '', 'g')\n"
    "$$\n")
FOLD_AS_SENT = """
CREATE OR REPLACE FUNCTION engram_text_form(t text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT t $$
"""

_INDEXED = "to_tsvector('english', engram_text_form(NEW.content))"
# The rows whose indexed text the fold changes, against migration 0031's.
REINDEX = ("UPDATE memories SET covered_days = covered_days "
           "WHERE engram_text_form(content) <> " + _NFKC.format(t="content"))


def _function(expression: str) -> str:
    previous = revision_module("0010").TSV_FUNCTION
    content = revision_module("0031")._CONTENT
    assert content in previous
    return previous.replace(content, expression)


def upgrade() -> None:
    utf8 = utf8_encoded(op.get_bind())
    op.execute(FOLD_UTF8 if utf8 else FOLD_AS_SENT)
    op.execute(_function(_INDEXED))
    if utf8:
        op.execute(REINDEX)


def downgrade() -> None:
    if utf8_encoded(op.get_bind()):
        op.execute(_function(revision_module("0031")._NORMAL))
        op.execute(REINDEX)
    else:
        op.execute(revision_module("0010").TSV_FUNCTION)
    op.execute("DROP FUNCTION engram_text_form(text)")
