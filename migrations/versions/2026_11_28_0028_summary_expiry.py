"""A summary expires no later than the first of its sources to expire.

Summaries were written to expire with the last of their sources, or never beside one
that never expires, so a source's text stored for seconds lived on in its summary. New
summaries expire with the first (app/consolidation/executor.py, `first_expiry`); this
brings the summaries already written into line, from the sources still stored. It only
moves expiries forward, so the downgrade leaves them as they are.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Each run reads its sources' expiry as they stood before it: a summary of a summary this
# run capped is capped by the next run, until none changes (chains are a few deep).
CAP = """
UPDATE memories s SET expires_at = f.first
  FROM (SELECT m.tenant_id, m.id, min(src.expires_at) AS first
          FROM memories m
          JOIN memories src ON src.tenant_id = m.tenant_id AND src.id = ANY(m.summary_of)
         WHERE m.fact_role = 'summary'
         GROUP BY m.tenant_id, m.id) f
 WHERE s.tenant_id = f.tenant_id AND s.id = f.id AND f.first IS NOT NULL
   AND (s.expires_at IS NULL OR s.expires_at > f.first)
"""


def upgrade() -> None:
    bind = op.get_bind()
    while bind.execute(sa.text(CAP)).rowcount:
        pass


def downgrade() -> None:
    # Nothing to undo: an expiry brought forward is one the summary should have had.
    pass
