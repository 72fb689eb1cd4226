"""A keyed create's answer is kept as the text that was sent.

`jsonb` stores an object's keys in its own order (shorter keys first), so a replayed
answer came back with its fields, and a memory's metadata keys, in another order than
the first answer: the same JSON value, not the same body. Stored as text, a retry gets
the first answer's bytes. Existing answers keep jsonb's rendering (still the same value).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("ALTER TABLE idempotency_keys "
               "ALTER COLUMN response_body TYPE text USING response_body::text")


def downgrade() -> None:
    op.execute("ALTER TABLE idempotency_keys "
               "ALTER COLUMN response_body TYPE jsonb USING response_body::jsonb")
