"""The embedded server's watch: a running server is left alone, a failed start is counted
and tried again at the next check. (Killing the real postmaster under a running service is
tests/integration/test_cli_and_process.py's.)"""

from __future__ import annotations

import asyncio
import json
import logging
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


def test_a_start_that_fails_says_the_servers_reason_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by a disk-full probe: a start on a full disk logged pg_ctl's command, the
    whole server log in one 20 KB ERROR line (75 KB at each of the watch's tries) and a
    traceback; the reason was the log's last line. A setting the server refuses fails
    its start the same way, and is what this test gives it."""
    embedded = embedded_db.start_embedded(tmp_path, shared_buffers_mb=32,
                                          maintenance_work_mem_mb=16)
    embedded.stop()
    with (embedded.pgdata / "postgresql.auto.conf").open("a") as conf:
        conf.write("work_mem = 'plenty'\n")

    with pytest.raises(embedded_db.EmbeddedStartFailed) as caught:
        embedded_db.start_embedded(tmp_path, shared_buffers_mb=32,
                                   maintenance_work_mem_mb=16)

    said = str(caught.value)
    assert said.startswith(f"the embedded PostgreSQL in {embedded.pgdata} did not start: ")
    assert said.endswith(f'FATAL:  configuration file "{embedded.pgdata}/postgresql.auto.conf" '
                         f"contains errors (its log: {embedded.pgdata}/log)")
    assert "\n" not in said
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_reason_is_the_last_fatal_or_panic_line_of_the_logs_end(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.write_text("LOG:  starting\n" + "x" * 200_000 + "\nFATAL:  an old one\n"
                   "2026-12-02 LOG:  redo starts\n2026-12-02 PANIC:  could not write to "
                   'file "pg_wal/xlogtemp.12": No space left on device\nLOG:  aborted\n')

    assert embedded_db.failure_reason(log) == (
        'PANIC:  could not write to file "pg_wal/xlogtemp.12": No space left on device')
    assert embedded_db.failure_reason(tmp_path / "none") is None
    # Only what this start wrote: an earlier start's reason is not this one's (a re-probe).
    written = log.stat().st_size
    with log.open("a") as more:
        more.write("LOG:  starting again\n")
    assert embedded_db.failure_reason(log, since=written) is None
    assert embedded_db.failure_reason(log, since=written + 10**6) is not None  # replaced


def test_a_lock_file_that_cannot_be_read_is_not_taken_for_a_stopped_server(
    embedded_pg: EmbeddedPostgres, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Out of file descriptors the lock file's read failed, and the watch took the running
    server for stopped: it tried a restart, failed and counted it (a probe, `ulimit -n`)."""
    def no_descriptors(_: Path, __: int) -> str:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(embedded_db, "_read_line", no_descriptors)
    monkeypatch.setattr(embedded_db, "_UNREADABLE_LOCK_LINES", embedded_db.Throttle())

    assert embedded_pg.is_running()
    assert any("Too many open files" in r.getMessage() for r in caplog.records)
