"""The model the stored vectors come from: one row for the whole database (migration 0021).

A Core table: app/embedding_space reads and writes it, in SQL.
"""

from __future__ import annotations

from sqlalchemy import Boolean, CheckConstraint, Column, DateTime, Table, Text, text
from sqlalchemy.dialects.postgresql import UUID

from app.models.base import Base

embedding_space = Table(
    "embedding_space",
    Base.metadata,
    # One row: the key can only be true.
    Column("singleton", Boolean, primary_key=True, server_default=text("true")),
    # The embedder's vector_space that every stored vector comes from.
    Column("model", Text, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    # A re-embedding under way (`python -m app reembed`): the model it moves the vectors
    # to, and the id of the last memory done, in id order; both null otherwise.
    Column("target_model", Text, nullable=True),
    Column("target_after", UUID, nullable=True),
    CheckConstraint("singleton", name="ck_embedding_space_singleton"),
)
