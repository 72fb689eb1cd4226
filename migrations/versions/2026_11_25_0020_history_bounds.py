"""A memory's history is bounded: at most `engram.history_max_versions` states a memory,
and the states older than a retention can be purged by their `replaced_at`.

A memory an agent rewrites in a loop grew its history without bound (migration 0018).
The trigger now reads the session setting `engram.history_max_versions`, which the
service's connections start with (ENGRAM_HISTORY_MAX_VERSIONS): after adding a state it
deletes the states more than that many versions old, by the primary key's range, so a
memory never holds more; 0 keeps none. A connection without the setting (psql, a script)
keeps every state, as before. Version numbers keep counting, so a pruned history starts
above 1.

The maintenance round's purge by age (ENGRAM_HISTORY_RETENTION_DAYS) reads states by
`replaced_at`, hence its index.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INSERT = (
    "  INSERT INTO memory_versions (tenant_id, memory_id, version, content, category,\n"
    "      tags, importance, metadata, expires_at, valid_from, replaced_at)\n"
    "  SELECT OLD.tenant_id, OLD.id, coalesce(max(v.version), 0) + 1, OLD.content,\n"
    "      OLD.category, OLD.tags, OLD.importance, OLD.metadata, OLD.expires_at,\n"
    "      OLD.updated_at, NEW.updated_at\n"
    "    FROM memory_versions v WHERE v.tenant_id = OLD.tenant_id AND v.memory_id = OLD.id"
)


# The function this revision installs (migration 0027's downgrade restores it).
FUNCTION = (
    "CREATE OR REPLACE FUNCTION memories_history() RETURNS trigger LANGUAGE plpgsql AS $$\n"
    "DECLARE\n"
    "  keep int := nullif(current_setting('engram.history_max_versions', true), '')::int;\n"
    "  added int;\n"
    "BEGIN\n"
    "  IF keep IS NOT NULL AND keep <= 0 THEN\n"
    "    RETURN NULL;\n"
    "  END IF;\n"
    f"{_INSERT}\n"
    "  RETURNING version INTO added;\n"
    "  IF keep IS NOT NULL AND added > keep THEN\n"
    "    DELETE FROM memory_versions v\n"
    "     WHERE v.tenant_id = OLD.tenant_id AND v.memory_id = OLD.id\n"
    "       AND v.version <= added - keep;\n"
    "  END IF;\n"
    "  RETURN NULL;\n"
    "END $$")


def upgrade() -> None:
    # CREATE OR REPLACE keeps the trigger (and its WHEN clause) pointing at the function.
    op.execute(FUNCTION)
    op.create_index("ix_memory_versions_replaced_at", "memory_versions", ["replaced_at"])


def downgrade() -> None:
    op.drop_index("ix_memory_versions_replaced_at", table_name="memory_versions")
    op.execute(
        "CREATE OR REPLACE FUNCTION memories_history() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        "BEGIN\n"
        f"{_INSERT};\n"
        "  RETURN NULL;\n"
        "END $$")
