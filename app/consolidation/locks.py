"""One advisory lock per (tenant, scope), so two runs on a scope never interleave.

The lock is session-level and lives on a dedicated pooled connection for the whole run,
with no transaction open on it (the run's LLM calls happen while it is held). When the
process dies the connection dies and PostgreSQL releases the lock, which is how a run
cut off by a crash is told apart from one still going (see `runs.fail_abandoned_runs`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.consolidation.schemas import ConsolidationRequest

log = logging.getLogger("engram.consolidation")

ScopeFields = tuple[str | None, str | None, str | None, str | None]


def scope_key(scope: Sequence[str | None]) -> str:
    """(user_id, agent_id, session_id, namespace) as one string, nulls included."""
    return json.dumps(list(scope), separators=(",", ":"))


def lock_key(tenant_id: uuid.UUID, scope: Sequence[str | None]) -> int:
    """A signed 64-bit advisory lock key for the scope (hash collisions only serialise
    two unrelated scopes, never break anything)."""
    return _key(f"engram:consolidation:{tenant_id}:{scope_key(scope)}")


def run_lock_key(tenant_id: uuid.UUID, request: ConsolidationRequest, run_id: uuid.UUID) -> int:
    """The lock a run holds while it runs: its scope's, or for a dry run (which writes
    nothing and may overlap anything) one of its own, so a crashed dry run is noticed
    the same way as any other run."""
    if request.dry_run:
        return _key(f"engram:consolidation-run:{run_id}")
    return lock_key(tenant_id, (request.user_id, request.agent_id, request.session_id,
                                request.namespace))


def _key(text: str) -> int:
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


async def lock_is_free(connection: AsyncConnection, key: int) -> bool:
    """Whether nobody holds the lock right now (takes and drops it in one statement)."""
    return bool(await connection.scalar(
        text("SELECT CASE WHEN pg_try_advisory_lock(:k) THEN pg_advisory_unlock(:k) "
             "ELSE false END"),
        {"k": key},
    ))


# On the run's connection, while it holds the lock: commits do not wait for the WAL flush
# (txn.RunTransactions explains why that is safe), and prepared statements may use
# generic plans: the run repeats a few primary-key statements thousands of times, and
# re-planning each (the pool's force_custom_plan, set for vector search) costs more than
# the statements. `release` restores both.
_ACQUIRE = (
    "SELECT CASE WHEN pg_try_advisory_lock($1) THEN "
    "set_config('synchronous_commit', 'off', false) "
    "|| set_config('plan_cache_mode', 'auto', false) END IS NOT NULL AS got, "
    "pg_backend_pid() AS pid"
)
_RESET = "RESET synchronous_commit; RESET plan_cache_mode"


class ScopeLock:
    """The scope's lock, held on its own connection until `release`. The run does its
    short transactions on `connection` too (see `txn.RunTransactions`)."""

    def __init__(self, engine: AsyncEngine, key: int) -> None:
        self.engine = engine
        self.key = key
        self.pid: int | None = None
        self.connection: AsyncConnection | None = None

    async def try_acquire(self) -> AsyncConnection | None:
        """The run's connection, holding the lock; None when the lock is taken."""
        connection = await self.engine.connect()
        try:
            # Straight on the driver, outside any transaction: one round trip, and the
            # connection is left idle with no transaction open for the whole run.
            raw = (await connection.get_raw_connection()).driver_connection
            assert raw is not None
            row = await raw.fetchrow(_ACQUIRE, self.key)
        except BaseException:
            await connection.invalidate()
            await connection.close()
            raise
        if not row["got"]:
            await connection.close()
            return None
        self.pid = int(row["pid"])
        self.connection = connection
        return connection

    async def release(self) -> None:
        connection, self.connection = self.connection, None
        if connection is None:
            return
        try:
            await connection.rollback()  # whatever a cancelled transaction left behind
            raw = (await connection.get_raw_connection()).driver_connection
            assert raw is not None
            await raw.execute(f"SELECT pg_advisory_unlock({int(self.key)}); {_RESET}")
        except Exception:
            # A lock left on a pooled connection would outlive the run: drop the
            # connection instead, which releases it.
            log.warning("could not release consolidation lock %d; closing its connection",
                        self.key, exc_info=True)
            await connection.invalidate()
        finally:
            await connection.close()
