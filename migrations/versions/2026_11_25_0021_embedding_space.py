"""The model the stored vectors come from, so a service started with another embedder
refuses to mix two models' vectors (app/embedding_space).

One row for the database. The migration does not know the embedder, so the service
records it at its first start; a database that already holds memories is taken to hold
the vectors of the embedder that start configures, as before this revision.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "embedding_space",
        sa.Column("singleton", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
                  nullable=False),
        sa.Column("target_model", sa.Text(), nullable=True),
        sa.Column("target_after", postgresql.UUID(), nullable=True),
        sa.CheckConstraint("singleton", name="ck_embedding_space_singleton"),
        sa.PrimaryKeyConstraint("singleton"),
    )


def downgrade() -> None:
    op.drop_table("embedding_space")
