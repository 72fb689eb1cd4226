"""The SQL of a tenant's export and import (app/tenants/transfer.py): its rows as JSON
text, out; JSON rows into its tables, in; and what an import replaces or checks first.

Rows leave as PostgreSQL writes them (`to_jsonb`: a vector as its text, bytes as hex, a
timestamp with its zone) and come back through `json_populate_recordset`, which reads
each value with its column's own input function, so every type round-trips exactly
without Python knowing it. Columns an export does not hold take their defaults.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.consolidation.repository import RUN_LOCK_HELD
from app.tenants.transfer_format import TENANTS, Table
from app.worker.queue import drop_tenant_jobs_on


def quoted(name: str) -> str:
    # Column names are the schema's own (`cursor`, `trigger` are keywords).
    return '"' + name.replace('"', '""') + '"'


class TransferRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def read_only(self) -> None:
        """The transaction reads only (the first statement of it)."""
        await self._conn.execute(text("SET TRANSACTION READ ONLY"))

    async def schema_revision(self) -> str | None:
        return (await self._conn.execute(
            text("SELECT version_num FROM alembic_version"))).scalar()

    async def vector_space(self) -> tuple[str | None, bool]:
        """The recorded model of the stored vectors (None: none yet) and whether a
        re-embedding is unfinished; a plain read (an export's transaction is read-only)."""
        row = (await self._conn.execute(text(
            "SELECT model, target_model FROM embedding_space"))).first()
        if row is None:
            return None, False
        return (row[0] or None), row[1] is not None

    async def columns(self, table: str) -> tuple[str, ...]:
        rows = await self._conn.execute(text(
            "SELECT attname FROM pg_attribute WHERE attrelid = CAST(:t AS regclass) "
            "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"), {"t": table})
        return tuple(r[0] for r in rows)

    async def tenant_id(self, name: str, *, lock: bool = False) -> uuid.UUID | None:
        """The tenant's id; with `lock`, its row locked for the transaction, so two
        imports over one tenant take turns (the second's clear saw nothing the first
        wrote, and the tenant kept both exports' memories)."""
        return (await self._conn.execute(
            text("SELECT id FROM tenants WHERE name = :name"
                 + (" FOR UPDATE" if lock else "")), {"name": name})).scalar()

    async def tenant_name(self, tenant_id: uuid.UUID) -> str | None:
        return (await self._conn.execute(
            text("SELECT name FROM tenants WHERE id = :id"), {"id": tenant_id})).scalar()

    async def rows(self, table: Table, tenant_id: uuid.UUID) -> AsyncIterator[str]:
        """The tenant's rows of `table` as JSON text, without its derived columns, in the
        table's order; streamed through a server-side cursor (a tenant may hold
        millions)."""
        owner = "id" if table is TENANTS else "tenant_id"
        order = ", ".join(quoted(c) for c in table.order_by)
        result = await self._conn.stream(text(
            f"SELECT CAST(to_jsonb(t) - CAST(:derived AS text[]) AS text) "
            f"FROM {quoted(table.name)} t WHERE t.{owner} = :tenant ORDER BY {order}"),
            {"derived": list(table.derived), "tenant": tenant_id})
        async for row in result:
            yield row[0]

    async def insert(self, table: str, columns: Sequence[str], rows_json: str) -> None:
        """The rows (a JSON array of objects) into `table`, each column of `columns` from
        its key (absent: NULL)."""
        names = ", ".join(quoted(c) for c in columns)
        await self._conn.execute(text(
            f"INSERT INTO {quoted(table)} ({names}) "
            f"SELECT {', '.join(f'r.{quoted(c)}' for c in columns)} FROM json_populate_recordset("
            f"CAST(NULL AS {quoted(table)}), CAST(CAST(:rows AS text) AS json)) AS r"),
            {"rows": rows_json})

    async def live_runs(self, tenant_id: uuid.UUID) -> list[uuid.UUID]:
        """The tenant's consolidation runs being run now (their worker holds the lock)."""
        rows = await self._conn.execute(text(
            "SELECT r.id FROM consolidation_runs r WHERE r.tenant_id = :t "
            f"AND r.status = 'running' AND {RUN_LOCK_HELD} ORDER BY r.id"), {"t": tenant_id})
        return [r[0] for r in rows]

    async def clear(self, tenant_id: uuid.UUID) -> dict[str, int]:
        """Delete what an import replaces: the tenant's memories (their history goes with
        them), sessions (turns and events with them), consolidation runs, write counters,
        idempotency keys (their stored answers name the memories going) and queued jobs.
        Its row, keys and limits stay. How many of each went."""
        gone: dict[str, int] = {}
        for table in ("memories", "sessions", "consolidation_runs", "scope_write_counters",
                      "idempotency_keys"):
            result = await self._conn.execute(
                text(f"DELETE FROM {table} WHERE tenant_id = :t"), {"t": tenant_id})
            gone[table] = int(getattr(result, "rowcount", 0) or 0)
        gone["jobs"] = await drop_tenant_jobs_on(self._conn, tenant_id)
        return gone

    async def shared_key(self, tenant_id: uuid.UUID) -> tuple[str, str] | None:
        """A key of the tenant that another tenant holds too (its prefix, the other's
        name): a request with it would act as either."""
        row = (await self._conn.execute(text(
            "SELECT a.prefix, t.name FROM api_keys a "
            "JOIN api_keys b ON b.key_hash = a.key_hash AND b.tenant_id <> a.tenant_id "
            "AND b.revoked_at IS NULL "
            "JOIN tenants t ON t.id = b.tenant_id "
            "WHERE a.tenant_id = :t AND a.revoked_at IS NULL LIMIT 1"),
            {"t": tenant_id})).first()
        return None if row is None else (row[0], row[1])

    async def fail_runs_under_way(self, tenant_id: uuid.UUID, error: str) -> int:
        """Runs the export caught while running: none runs here, so they end failed."""
        result = await self._conn.execute(text(
            "UPDATE consolidation_runs SET status = 'failed', lock_pid = NULL, "
            "finished_at = coalesce(finished_at, now()), error = :error "
            "WHERE tenant_id = :t AND status = 'running'"), {"t": tenant_id, "error": error})
        return int(getattr(result, "rowcount", 0) or 0)
