"""The embedded server's watch: a running server is left alone, a failed start is counted
and tried again at the next check. (Killing the real postmaster under a running service is
tests/integration/test_cli_and_process.py's.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app.embedded_db import EmbeddedPostgres, _clear_stale_locks, keep_running
from tests.conftest import sample


def test_a_running_embedded_server_is_left_alone(embedded_pg: EmbeddedPostgres) -> None:
    pid = int((embedded_pg.pgdata / "postmaster.pid").read_text().split()[0])

    assert embedded_pg.is_running()
    assert embedded_pg.revive() is False

    assert int((embedded_pg.pgdata / "postmaster.pid").read_text().split()[0]) == pid


class StoppedServer:
    """Down until its second start succeeds."""

    pgdata = Path("/nonexistent")

    def __init__(self) -> None:
        self.starts = 0
        self.up = asyncio.Event()

    def is_running(self) -> bool:
        return self.up.is_set()

    def revive(self) -> bool:
        self.starts += 1
        if self.starts == 1:
            raise RuntimeError("the embedded PostgreSQL's postmaster died and its backends "
                               "are still exiting")
        self.up.set()
        return True


async def test_a_failed_start_is_counted_and_tried_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = StoppedServer()
    ok, failed = (sample("engram_embedded_postgres_restarts_total", outcome=o)
                  for o in ("ok", "failed"))
    watch = asyncio.create_task(keep_running(server, 0.01))  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(server.up.wait(), 5)
        await asyncio.sleep(0.05)  # later checks find it running: no more starts
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)

    assert server.starts == 2
    assert sample("engram_embedded_postgres_restarts_total", outcome="failed") == failed + 1
    assert sample("engram_embedded_postgres_restarts_total", outcome="ok") == ok + 1
    messages = [r.getMessage() for r in caplog.records]
    assert any("starting the embedded PostgreSQL again failed (RuntimeError" in m
               for m in messages)
    assert any("the embedded PostgreSQL runs again" in m for m in messages)


def test_a_running_servers_lock_files_are_never_taken_for_stale(
    embedded_pg: EmbeddedPostgres,
) -> None:
    before = (embedded_pg.pgdata / "postmaster.pid").read_text()

    _clear_stale_locks(embedded_pg.pgdata)

    assert (embedded_pg.pgdata / "postmaster.pid").read_text() == before
    assert list(embedded_pg.pgdata.glob(".s.PGSQL.*.lock"))
