"""The embedded server's watch: a running server is left alone, a failed start is counted
and tried again at the next check. (Killing the real postmaster under a running service is
tests/integration/test_cli_and_process.py's.)"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from app import embedded_db
from app.embedded_db import (
    HANDLES,
    PARALLEL_WORKERS,
    EmbeddedPostgres,
    _clear_stale_locks,
    _forget_dead_handles,
    _psql,
    keep_running,
    parallel_workers_for,
)
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


def test_processes_gone_without_letting_go_are_taken_off_the_handle_list(
    tmp_path: Path,
) -> None:
    """A crashed service stays on embedded-postgres's list, and while it does no stop of
    the service stops the server. A live user stays; so does a pid listed before the list
    was written, not one handed to a process started since."""
    with subprocess.Popen(["true"]) as crashed:
        crashed.wait()
    handles = tmp_path / HANDLES
    # Written once this process ran, and before the "reused" pid's process started.
    written = psutil.Process().create_time() + 1
    while time.time() < written + 1:
        time.sleep(0.05)
    with subprocess.Popen(["sleep", "30"]) as reused:
        try:
            handles.write_text(json.dumps([crashed.pid, os.getpid(), reused.pid]))
            os.utime(handles, (written, written))

            _forget_dead_handles(tmp_path)

            assert json.loads(handles.read_text()) == [os.getpid()]
            assert reused.poll() is None  # only forgotten, never signalled
        finally:
            reused.kill()


def test_a_handle_list_with_only_live_users_is_left_as_it_is(tmp_path: Path) -> None:
    handles = tmp_path / HANDLES
    handles.write_text(json.dumps([os.getpid()]))
    before = handles.stat().st_mtime_ns

    _forget_dead_handles(tmp_path)
    _forget_dead_handles(tmp_path / "no-such-dir")

    assert (json.loads(handles.read_text()), handles.stat().st_mtime_ns) == ([os.getpid()],
                                                                             before)


@pytest.mark.parametrize(("maintenance_mb", "shm_mib", "workers"), [
    (256, 24 * 1024, 2),  # this machine: parallel builds
    (256, 64, 0),  # Docker's default /dev/shm under the 256 MiB segment: serial
    (1024, 1280, 2), (1024, 1279, 0),  # a quarter's headroom over the segment
])
def test_index_builds_run_in_parallel_only_where_dev_shm_holds_their_segment(
    maintenance_mb: int, shm_mib: int, workers: int,
) -> None:
    """A parallel HNSW build shares a segment of maintenance_work_mem in /dev/shm, and a
    container's 64 MiB failed it ("could not resize shared memory segment")."""
    assert parallel_workers_for(maintenance_mb, shm_mib * 2**20) == workers
    assert parallel_workers_for(maintenance_mb, None) == PARALLEL_WORKERS


def test_a_start_on_a_small_dev_shm_turns_parallel_builds_off_and_a_larger_one_on(
    embedded_pg: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What each start does (the suite's server has 256 MiB of maintenance memory): a
    container's 64 MiB /dev/shm, then the room back."""

    def workers() -> str:
        shown = _psql(embedded_pg.server, "SHOW max_parallel_maintenance_workers;")
        return [line.strip() for line in shown.splitlines()][2]

    try:
        monkeypatch.setattr(embedded_db, "_shm_bytes", lambda: 64 * 2**20)
        embedded_db._fit_parallel_builds(embedded_pg.server)
        assert workers() == "0"
        monkeypatch.setattr(embedded_db, "_shm_bytes", lambda: 24 * 2**30)
        embedded_db._fit_parallel_builds(embedded_pg.server)
        assert workers() == str(PARALLEL_WORKERS)
    finally:
        monkeypatch.undo()
        embedded_db._fit_parallel_builds(embedded_pg.server)
