"""Memories: the facts and summaries agents store, with their embedding and full-text vector."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Date,
    DateTime,
    FetchedValue,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TSVECTOR, UUID
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base
from app.models.vector import Embedding
from app.settings import EMBEDDING_DIMENSIONS

SCOPE_COLUMNS = ("user_id", "agent_id", "session_id", "namespace")
"""The columns that name a scope, each with its own btree; a search or run filters on any."""


def _scope_index(column: str) -> Index:
    # Scope filters are equality on one column plus newest-first order: one btree serves
    # the listing, cursor paging, and exact-distance search over a small scope.
    return Index(
        f"ix_memories_tenant_{column}_created",
        "tenant_id",
        column,
        text("created_at DESC"),
        text("id DESC"),
        postgresql_where=text(f"{column} IS NOT NULL"),
    )


class Memory(Base):
    __tablename__ = "memories"
    __table_args__ = (
        CheckConstraint("importance >= 0 AND importance <= 1", name="importance_range"),
        CheckConstraint("fact_role IN ('fact', 'summary')", name="fact_role_valid"),
        Index("ix_memories_tenant_created", "tenant_id", text("created_at DESC"),
              text("id DESC")),
        *(_scope_index(column) for column in SCOPE_COLUMNS),
        Index("ix_memories_tags", "tags", postgresql_using="gin"),
        # Tags keyed by tenant (migration 0008: "<tenant>/<tag>" through tenant_tags()):
        # a search filtered by tags and no scope column matches only this index, so its
        # generic plans never AND in a tenant-led btree, which reads the whole tenant.
        # Its second column (migration 0011) lets GIN intersect a tag with the query's
        # rare terms before any row is read.
        Index("ix_memories_tenant_tags", text("tenant_tags(tenant_id, tags)"), "tsv",
              postgresql_using="gin", postgresql_where=text("cardinality(tags) > 0")),
        # Full text keyed by tenant, tenant/user (migration 0005, btree_gin) and
        # tenant/category (0012) too, so a large scope's rare-term match is intersected in
        # the index; the keys are expressions so that only this index matches them
        # (app/search/repository.py).
        Index("ix_memories_tsv_scope", text("tenant_id::text"),
              text("(tenant_id::text || '/'::text) || user_id::text"),
              text("(tenant_id::text || '/'::text) || category::text"), "tsv",
              postgresql_using="gin"),
        Index("ix_memories_tenant_category", "tenant_id", "category"),
        # Metadata by containment, the only way it is filtered (migration 0019).
        Index("ix_memories_metadata", "metadata", postgresql_using="gin",
              postgresql_ops={"metadata": "jsonb_path_ops"}),
        # The id alone (migration 0006): the search's row lookups match only this index,
        # so their generic plan never walks a tenant-led index instead.
        Index("ix_memories_id", "id", unique=True),
        # Only the memories that have an expiry (migration 0007): the maintenance purge
        # finds the expired ones without reading the rows that never expire.
        Index("ix_memories_expires_at", "expires_at",
              postgresql_where=text("expires_at IS NOT NULL")),
        # Lineage lookups (migration 0002): which summaries already cover a memory, and
        # whether a run's summary has been folded again.
        Index("ix_memories_summary_of", "summary_of", postgresql_using="gin",
              postgresql_where=text("fact_role = 'summary'")),
        # A user's active memories, least important and oldest first (migration 0025):
        # the capacity bound's victims, found without reading the user's other rows.
        Index("ix_memories_tenant_user_evict", "tenant_id", "user_id", "importance",
              "created_at", "id",
              postgresql_where=text("archived_at IS NULL AND user_id IS NOT NULL")),
        # And its expired ones, which go first: through ix_memories_expires_at a user's
        # were found among every tenant's expired rows the purge had not reached yet.
        Index("ix_memories_tenant_user_expiring", "tenant_id", "user_id", "expires_at",
              postgresql_where=text("expires_at IS NOT NULL AND archived_at IS NULL "
                                    "AND user_id IS NOT NULL")),
        # What names a run (its summaries, the facts it archived): the consolidation
        # runs' retention keeps a run while any does (migration 0029).
        Index("ix_memories_consolidation", "tenant_id", "consolidation_id",
              postgresql_where=text("consolidation_id IS NOT NULL")),
        # Only active rows (migration 0002): search never reads archived ones, and an
        # archiving UPDATE then adds no graph node for the row's new version, which made
        # consolidation's archive step several times slower (bench/consolidate.py).
        # A query uses it only with `archived_at IS NULL` among its predicates.
        Index(
            "ix_memories_embedding_hnsw",
            "embedding",
            postgresql_using="hnsw",
            postgresql_with={"m": 16, "ef_construction": 64},
            postgresql_ops={"embedding": "halfvec_cosine_ops"},
            postgresql_where=text("archived_at IS NULL"),
        ),
    )

    tenant_id: Mapped[uuid.UUID] = mapped_column(
        UUID, ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    id: Mapped[uuid.UUID] = mapped_column(UUID, primary_key=True)
    content: Mapped[str] = mapped_column(Text)
    user_id: Mapped[str | None] = mapped_column(String(255))
    agent_id: Mapped[str | None] = mapped_column(String(255))
    session_id: Mapped[str | None] = mapped_column(String(255))
    namespace: Mapped[str | None] = mapped_column(String(255))
    category: Mapped[str] = mapped_column(String(100), server_default="general")
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    importance: Mapped[float] = mapped_column(Float, server_default="0.5")
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, server_default="{}")
    source: Mapped[str] = mapped_column(String(64), server_default="api")
    fact_role: Mapped[str] = mapped_column(String(16), server_default="fact")
    summary_of: Mapped[list[uuid.UUID]] = mapped_column(ARRAY(UUID), server_default="{}")
    # A summary's: the UTC days of the facts it covers (migration 0010), which the date
    # match and the full-text day words read instead of its write date; [] for a fact.
    covered_days: Mapped[list[date]] = mapped_column(ARRAY(Date), server_default="{}")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())
    # Set, on a change of a tracked column, by the memories_history trigger (migration
    # 0027): stamped once the row is locked, so never before the state it replaces.
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True),
                                                 server_default=func.now())
    # The current state's number in the memory's history (1 as first stored); the trigger
    # records the replaced state under it and adds one, whatever was erased (0027).
    version: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The expiry a client gave the memory itself (migration 0030). A fact's is its expiry;
    # a summary's expiry is the sooner of its own and its sources' first (`follow_expiry`).
    own_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    archived_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    consolidation_id: Mapped[uuid.UUID | None] = mapped_column(UUID)
    embedding: Mapped[Any] = mapped_column(Embedding(EMBEDDING_DIMENSIONS))
    # Maintained by the memories_tsv trigger (migrations 0003, 0010): content plus the UTC
    # day words (a summary's covered days).
    tsv: Mapped[Any] = mapped_column(TSVECTOR, server_default=FetchedValue())
