"""Foundation: tenants, API keys, memories, idempotency keys.

Every key and unique constraint leads with tenant_id so one tenant's rows stay together
and the schema can be distributed by tenant. The embedding is a halfvec: half the index
size of vector(384) for no measurable recall loss on MiniLM vectors, so the HNSW graph
stays in shared buffers (see the README's storage section for the measurements).

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from pgvector.sqlalchemy import HALFVEC
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT_TENANT_ID = "00000000-0000-0000-0000-000000000001"
SCOPES = ("user_id", "agent_id", "session_id", "namespace")


def upgrade() -> None:
    op.execute("CREATE EXTENSION IF NOT EXISTS vector")

    op.create_table(
        "tenants",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_tenants"),
        sa.UniqueConstraint("name", name="uq_tenants_name"),
    )
    op.execute(f"INSERT INTO tenants (id, name) VALUES ('{DEFAULT_TENANT_ID}', 'default')")

    op.create_table(
        "api_keys",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(100), nullable=True),
        sa.Column("prefix", sa.String(32), nullable=False),
        sa.Column("key_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name="fk_api_keys_tenant_id_tenants"),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_api_keys"),
        sa.UniqueConstraint("tenant_id", "key_hash", name="uq_api_keys_tenant_id_key_hash"),
    )
    op.create_index("ix_api_keys_key_hash", "api_keys", ["key_hash"])

    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("operation", sa.String(64), nullable=False),
        sa.Column("request_hash", sa.LargeBinary(32), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("response_body", postgresql.JSONB(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name="fk_idempotency_keys_tenant_id_tenants"),
        sa.PrimaryKeyConstraint("tenant_id", "key", name="pk_idempotency_keys"),
    )
    op.create_index("ix_idempotency_keys_created_at", "idempotency_keys", ["created_at"])

    op.create_table(
        "memories",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("user_id", sa.String(255), nullable=True),
        sa.Column("agent_id", sa.String(255), nullable=True),
        sa.Column("session_id", sa.String(255), nullable=True),
        sa.Column("namespace", sa.String(255), nullable=True),
        sa.Column("category", sa.String(100), server_default="general", nullable=False),
        sa.Column("tags", postgresql.ARRAY(sa.Text()), server_default="{}", nullable=False),
        sa.Column("importance", sa.Float(), server_default="0.5", nullable=False),
        sa.Column("metadata", postgresql.JSONB(), server_default="{}", nullable=False),
        sa.Column("source", sa.String(64), server_default="api", nullable=False),
        sa.Column("fact_role", sa.String(16), server_default="fact", nullable=False),
        sa.Column("summary_of", postgresql.ARRAY(sa.Uuid()), server_default="{}",
                  nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("consolidation_id", sa.Uuid(), nullable=True),
        sa.Column("embedding", HALFVEC(384), nullable=False),
        sa.Column(
            "tsv",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('english'::regconfig, content)", persisted=True),
            nullable=False,
        ),
        sa.CheckConstraint("importance >= 0 AND importance <= 1",
                           name="ck_memories_importance_range"),
        sa.CheckConstraint("fact_role IN ('fact', 'summary')",
                           name="ck_memories_fact_role_valid"),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE",
                                name="fk_memories_tenant_id_tenants"),
        sa.PrimaryKeyConstraint("tenant_id", "id", name="pk_memories"),
    )
    op.create_index(
        "ix_memories_tenant_created", "memories",
        ["tenant_id", sa.text("created_at DESC"), sa.text("id DESC")],
    )
    for column in SCOPES:
        op.create_index(
            f"ix_memories_tenant_{column}_created", "memories",
            ["tenant_id", column, sa.text("created_at DESC"), sa.text("id DESC")],
            postgresql_where=sa.text(f"{column} IS NOT NULL"),
        )
    op.create_index("ix_memories_tags", "memories", ["tags"], postgresql_using="gin")
    op.create_index("ix_memories_tsv", "memories", ["tsv"], postgresql_using="gin")
    op.create_index(
        "ix_memories_embedding_hnsw", "memories", ["embedding"],
        postgresql_using="hnsw",
        postgresql_with={"m": 16, "ef_construction": 64},
        postgresql_ops={"embedding": "halfvec_cosine_ops"},
    )


def downgrade() -> None:
    op.drop_table("memories")
    op.drop_table("idempotency_keys")
    op.drop_table("api_keys")
    op.drop_table("tenants")
    # The vector extension stays: other schemas in the database may use it.
