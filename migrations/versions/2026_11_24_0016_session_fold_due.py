"""Sessions say when a fold is due with a flag, not an index on their turn count.

Migration 0015 indexed `turn_count - cursor` for the sweep that finds sessions with a fold
due. Every append changes `turn_count`, and an update that changes an indexed expression
cannot be a HOT update: each append wrote a new index entry and left a dead row version
the index points at (bench/sessions.py: 0 HOT updates of ~8,800). Now the append that
makes a fold due sets `fold_due_since` (once), the fold that leaves none due clears it,
and the sweep reads the partial index on it; appends in between change no indexed column.

The table's fill factor drops to 70%: each append updates its session's row, and a HOT
update needs room for the new version on the same page.

Existing rolling-summary sessions with unsummarised turns are flagged: the sweep queues
their fold, which clears the flag of those with nothing due.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_sessions_unsummarised", table_name="sessions")
    op.add_column("sessions", sa.Column("fold_due_since", sa.DateTime(timezone=True),
                                        nullable=True))
    op.execute("UPDATE sessions SET fold_due_since = now()"
               " WHERE strategy = 'rolling_summary' AND turn_count > cursor")
    op.create_index("ix_sessions_fold_due", "sessions", ["fold_due_since"],
                    postgresql_where=sa.text("fold_due_since IS NOT NULL"))
    op.execute("ALTER TABLE sessions SET (fillfactor = 70)")


def downgrade() -> None:
    op.execute("ALTER TABLE sessions RESET (fillfactor)")
    op.drop_index("ix_sessions_fold_due", table_name="sessions")
    op.drop_column("sessions", "fold_due_since")
    op.create_index("ix_sessions_unsummarised", "sessions", [sa.text("(turn_count - cursor)")],
                    postgresql_where=sa.text("strategy = 'rolling_summary'"))
