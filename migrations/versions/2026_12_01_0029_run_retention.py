"""What the consolidation runs' retention reads: which memories name a run, and when runs
finished.

A finished run that no memory names any more (no summary it wrote, no fact it archived)
is only a record, and the maintenance round deletes it past
ENGRAM_CONSOLIDATION_RUN_RETENTION_DAYS (app/consolidation/repository.py,
`purge_runs_finished_before`). Both indexes are partial: only summaries and archived facts
carry a run's id, and a run still going has no end. The runs' index holds the whole key,
so the purge walks them in order past those it keeps.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_memories_consolidation", "memories", ["tenant_id", "consolidation_id"],
                    postgresql_where=sa.text("consolidation_id IS NOT NULL"))
    op.create_index("ix_consolidation_runs_finished", "consolidation_runs",
                    ["finished_at", "tenant_id", "id"],
                    postgresql_where=sa.text("finished_at IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_consolidation_runs_finished", table_name="consolidation_runs")
    op.drop_index("ix_memories_consolidation", table_name="memories")
