"""A memory counts its own versions, and a change is stamped once the memory is locked.

Two faults of the history trigger (migrations 0018, 0020), both under the same rule:
"each version starts where the one before ended".

* Version numbers came from max(version) + 1 over the states still kept, so erasing a
  memory's past (DELETE .../history), or the retention purge taking all of it, started
  the numbering again at 1: version 1 then named a later state than the one first stored,
  and a history cursor issued before the erase read the new states. `memories.version` is
  now the current state's number (1 as first stored), kept on the row; each change
  records the replaced state under it and adds one, whatever was erased or pruned.
* `updated_at` was the PATCH transaction's start (now()), taken before the row lock was:
  of two changes racing for one memory, the one that waited could be stamped earlier than
  the one it waited for, and the history held states that ended before they began. The
  trigger now runs BEFORE the update, once PostgreSQL holds the row's lock and has the
  latest state as OLD, and stamps the change from the clock then, never earlier than the
  state it replaces. The trigger owns the stamp: a change of a tracked column by any
  writer (the API, a consolidation op, psql) gets it.

Adding a column with a constant default rewrites nothing; the backfill touches only the
memories that have a history.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.migrate import revision_module

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TRACKED = ("content", "category", "tags", "importance", "metadata", "expires_at")
_CHANGED = " OR ".join(f"OLD.{c} IS DISTINCT FROM NEW.{c}" for c in TRACKED)
_COLUMNS = ("tenant_id, memory_id, version, content, category, tags, importance, metadata,\n"
            "      expires_at, valid_from, replaced_at")


def upgrade() -> None:
    op.add_column("memories", sa.Column("version", sa.Integer(), nullable=False,
                                        server_default=sa.text("1")))
    op.execute(
        "UPDATE memories m SET version = v.last + 1\n"
        "  FROM (SELECT tenant_id, memory_id, max(version) AS last FROM memory_versions\n"
        "         GROUP BY tenant_id, memory_id) v\n"
        " WHERE m.tenant_id = v.tenant_id AND m.id = v.memory_id")
    op.execute("DROP TRIGGER memories_history ON memories")
    op.execute(
        "CREATE OR REPLACE FUNCTION memories_history() RETURNS trigger LANGUAGE plpgsql AS $$\n"
        "DECLARE\n"
        "  keep int := nullif(current_setting('engram.history_max_versions', true), '')::int;\n"
        "BEGIN\n"
        "  NEW.updated_at := greatest(clock_timestamp(), OLD.updated_at);\n"
        "  NEW.version := OLD.version + 1;\n"
        "  IF keep IS NULL OR keep > 0 THEN\n"
        f"    INSERT INTO memory_versions ({_COLUMNS})\n"
        "    VALUES (OLD.tenant_id, OLD.id, OLD.version, OLD.content, OLD.category, OLD.tags,\n"
        "      OLD.importance, OLD.metadata, OLD.expires_at, OLD.updated_at, NEW.updated_at);\n"
        "    IF keep IS NOT NULL THEN\n"
        "      DELETE FROM memory_versions v\n"
        "       WHERE v.tenant_id = OLD.tenant_id AND v.memory_id = OLD.id\n"
        "         AND v.version <= OLD.version - keep;\n"
        "    END IF;\n"
        "  END IF;\n"
        "  RETURN NEW;\n"
        "END $$")
    op.execute(f"CREATE TRIGGER memories_history BEFORE UPDATE ON memories FOR EACH ROW "
               f"WHEN ({_CHANGED}) EXECUTE FUNCTION memories_history()")


def downgrade() -> None:
    # Migration 0020's function and 0018's trigger, as they were.
    op.execute("DROP TRIGGER memories_history ON memories")
    op.execute(revision_module("0020").FUNCTION)
    op.execute(f"CREATE TRIGGER memories_history AFTER UPDATE ON memories FOR EACH ROW "
               f"WHEN ({_CHANGED}) EXECUTE FUNCTION memories_history()")
    op.drop_column("memories", "version")
