"""A CLI command cut short (SIGTERM): its task is cancelled, the tools it started are
killed, and the hidden partial file it was writing is removed. Found by an exploratory
probe: a backup killed by SIGTERM left `.engram.dump.partial`, a full unencrypted copy
of the database, and a pg_dump still writing it. Killed outright (SIGKILL), the command
runs no handler: its tools die with it all the same."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from signal import SIGINT, SIGKILL, SIGTERM, Signals

import psutil  # type: ignore[import-untyped]
import pytest

from app import backup as backup_module
from app.cli import _stoppable

FAKE_PG_DUMP = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in --file=*) out="${arg#--file=}" ;; esac
done
echo "$$" > "$PIDFILE"
printf 'a first part of the dump' >> "$out"
exec sleep 60
"""


@pytest.fixture
def slow_pg_dump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "pg_dump"
    script.write_text(FAKE_PG_DUMP)
    script.chmod(0o755)
    pidfile = tmp_path / "pg_dump.pid"
    monkeypatch.setenv("PIDFILE", str(pidfile))
    return pidfile


def written(pidfile: Path, partial: Path) -> None:
    """Once the fake pg_dump runs and has written to the partial file."""
    while not (pidfile.exists() and partial.exists() and partial.stat().st_size):
        time.sleep(0.02)


async def test_a_backup_cut_short_kills_pg_dump_and_leaves_no_partial_file(
    tmp_path: Path, slow_pg_dump: Path,
) -> None:
    target = tmp_path / "out" / "engram.dump"
    target.parent.mkdir()
    partial = target.with_name(f".{target.name}.partial")
    running = asyncio.create_task(
        backup_module.backup("postgresql://u@127.0.0.1:9/engram", target,
                             backup_module.ClientTools(tmp_path)))
    await asyncio.wait_for(asyncio.to_thread(written, slow_pg_dump, partial), 10)
    pid = int(slow_pg_dump.read_text())  # noqa: ASYNC240 - the test's own small file
    # Readable by its owner alone while it is written: it holds every tenant's memories.
    assert stat.S_IMODE(partial.stat().st_mode) == 0o600

    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    assert not partial.exists()
    assert not target.exists()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


BACKUP_IN_A_PROCESS = """
import asyncio, sys
from pathlib import Path
from app import backup
asyncio.run(backup.backup("postgresql://u@127.0.0.1:9/engram", Path(sys.argv[1]),
                          backup.ClientTools(Path(sys.argv[2]))))
"""


def ended(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_backup_killed_outright_takes_its_pg_dump_with_it(
    tmp_path: Path, slow_pg_dump: Path,
) -> None:
    """A probe's SIGKILLed backup left pg_dump running, which wrote a whole dump to the
    hidden file that nothing removed."""
    target = tmp_path / "engram.dump"
    partial = target.with_name(f".{target.name}.partial")
    command = subprocess.Popen([sys.executable, "-c", BACKUP_IN_A_PROCESS, str(target),
                                str(tmp_path)])
    try:
        written(slow_pg_dump, partial)
        pid = int(slow_pg_dump.read_text())
        assert psutil.Process(pid).ppid() == command.pid
        os.kill(command.pid, SIGKILL)
        command.wait(10)
        deadline = time.monotonic() + 10
        while not ended(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ended(pid)
    finally:
        command.kill()
        command.wait()
    assert not target.exists()


@pytest.mark.parametrize(("signal", "code"), [(SIGTERM, 143), (SIGINT, 130)])
async def test_sigterm_or_ctrl_c_cancels_the_command_and_says_which(
    capsys: pytest.CaptureFixture[str], signal: Signals, code: int,
) -> None:
    """Ctrl-C had been reported as SIGTERM, exit 143 (a probe)."""
    started = asyncio.Event()
    finished_cleanly = []

    async def command() -> int:
        started.set()
        try:
            await asyncio.sleep(30)
        finally:
            finished_cleanly.append(True)
        return 0

    run = asyncio.create_task(_stoppable("backup", command()))
    await asyncio.wait_for(started.wait(), 5)
    os.kill(os.getpid(), signal)

    assert await asyncio.wait_for(run, 5) == code
    assert finished_cleanly == [True]
    assert capsys.readouterr().err == (
        f"engram: backup was stopped by {signal.name} before it finished\n")
