"""What each stored idempotent answer names (`memory:<id>`, `session:<id>`), so that
erasing a memory, its history or a session erases the answers that quote it.

A keyed create's first answer is kept for its retries (ENGRAM_IDEMPOTENCY_TTL_HOURS, up
to 30 days), and it holds the memory or turn as created, text and all: after
`DELETE /v1/memories?user_id=...`, a memory's history erased or a user's sessions
deleted, a retry with the key served the erased text back (a day-2 probe). The names
are a GIN-indexed array; the answers stored before are named here from their JSON.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The operations' answers, as app/memories/router.py and app/sessions/router.py name them.
BACKFILL = """
UPDATE idempotency_keys SET names = CASE operation
    WHEN 'createMemory' THEN ARRAY['memory:' || (response_body::jsonb ->> 'id')]
    WHEN 'createMemories' THEN ARRAY(
        SELECT 'memory:' || (item ->> 'id')
        FROM jsonb_array_elements(response_body::jsonb -> 'items') AS item)
    WHEN 'appendTurn' THEN ARRAY['session:' || (response_body::jsonb ->> 'session_id')]
    END
WHERE status_code BETWEEN 200 AND 299 AND response_body IS NOT NULL
  AND operation IN ('createMemory', 'createMemories', 'appendTurn')
"""


def upgrade() -> None:
    op.execute("ALTER TABLE idempotency_keys ADD COLUMN names text[] NOT NULL DEFAULT '{}'")
    op.execute(BACKFILL)
    op.execute("CREATE INDEX ix_idempotency_keys_names ON idempotency_keys USING gin (names)")


def downgrade() -> None:
    op.execute("DROP INDEX ix_idempotency_keys_names")
    op.execute("ALTER TABLE idempotency_keys DROP COLUMN names")
