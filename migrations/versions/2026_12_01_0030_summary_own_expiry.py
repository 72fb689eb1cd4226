"""A memory keeps the expiry a client gave it itself, apart from the one it has.

A summary expires with the first of its sources, or sooner when a client set it so; its
expiry is the sooner of the two, and a source's expiry put off or cleared brings it back
to the client's, not past it. Without the client's value recorded, a summary set to
expire in 30 minutes, then brought forward by a source set to 10 and the source's expiry
then cleared, never expired (app/memories/repository.py, `follow_expiry`). The summaries
already stored get theirs from what they show: an expiry sooner than every source's, or
than none, can only have been a client's.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OWN = """
UPDATE memories s SET own_expires_at = s.expires_at
 WHERE s.expires_at IS NOT NULL
   AND (s.fact_role = 'fact'
        OR s.expires_at < coalesce(
               (SELECT min(src.expires_at) FROM memories src
                 WHERE src.tenant_id = s.tenant_id AND src.id = ANY(s.summary_of)),
               'infinity'))
"""


def upgrade() -> None:
    op.add_column("memories", sa.Column("own_expires_at", sa.DateTime(timezone=True),
                                        nullable=True))
    op.execute(OWN)


def downgrade() -> None:
    op.drop_column("memories", "own_expires_at")
