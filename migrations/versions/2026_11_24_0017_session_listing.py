"""Sessions are listed newest first, the tenant's or one user's.

`GET /v1/sessions` pages by (created_at, session_id) descending; these two indexes serve
it without sorting a tenant's sessions. `user_id` is written once per session (by its
first turn that names a user); later appends write the same value, so their updates stay
HOT.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_sessions_tenant_created", "sessions",
                    ["tenant_id", sa.text("created_at DESC"), sa.text("session_id DESC")])
    op.create_index("ix_sessions_tenant_user_created", "sessions",
                    ["tenant_id", "user_id", sa.text("created_at DESC"),
                     sa.text("session_id DESC")],
                    postgresql_where=sa.text("user_id IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_sessions_tenant_user_created", table_name="sessions")
    op.drop_index("ix_sessions_tenant_created", table_name="sessions")
