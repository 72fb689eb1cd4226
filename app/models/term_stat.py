"""BM25 term statistics per tenant (delta rows, folded in the background).

A Core table, not a mapped class: it has no key (writers append; see migration 0004),
and only SQL in app/search reads or folds it.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Column, Index, Table, Text, text
from sqlalchemy.dialects.postgresql import UUID

from app.models.base import Base

term_stats = Table(
    "term_stats",
    Base.metadata,
    Column("tenant_id", UUID, nullable=False),
    # '' is the corpus row: df = active memories, total_len = the sum of their lengths.
    Column("lexeme", Text, nullable=False),
    Column("df", BigInteger, nullable=False),
    Column("total_len", BigInteger, nullable=False, server_default="0"),
    Column("folded", Boolean, nullable=False, server_default="false"),
    Index("ix_term_stats_tenant_id_lexeme", "tenant_id", "lexeme"),
    Index("ix_term_stats_unfolded", "tenant_id", "lexeme", postgresql_where=text("NOT folded")),
)
