"""The database URL as the environment libpq's tools (pg_dump, pg_restore, psql) read;
the restore's handling of those tools failing, with shell scripts in their place."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from app import backup
from app.backup import libpq_env


def test_a_unix_socket_url_names_its_directory_as_the_host() -> None:
    env = libpq_env("postgresql+asyncpg://postgres@/engram?host=/tmp/engram-x/pgdata")
    assert env == {"PGDATABASE": "engram", "PGAPPNAME": "engram-cli",
                   "PGHOST": "/tmp/engram-x/pgdata", "PGUSER": "postgres"}


def test_a_tcp_url_keeps_its_password_off_the_command_line() -> None:
    env = libpq_env("postgresql://engram:s3cr%40t@db.internal:6543/memories?ssl=require")
    assert env == {"PGDATABASE": "memories", "PGAPPNAME": "engram-cli",
                   "PGHOST": "db.internal", "PGPORT": "6543", "PGUSER": "engram",
                   "PGPASSWORD": "s3cr@t", "PGSSLMODE": "require"}


def test_libpq_spellings_are_taken_too() -> None:
    env = libpq_env("postgresql://u@/d?host=/run/pg&port=5433&sslmode=disable")
    assert (env["PGHOST"], env["PGPORT"], env["PGSSLMODE"]) == ("/run/pg", "5433", "disable")


def test_the_user_and_the_tls_files_in_the_query_reach_the_tools() -> None:
    """`?user=` was dropped (pg_dump connected as the shell's user), and a verify-full
    URL's CA file with it."""
    env = libpq_env("postgresql:///engram?host=/run/pg&port=5433&user=postgres&password=pw"
                    "&sslmode=verify-full&sslrootcert=/etc/ca.pem&connect_timeout=5")
    assert (env["PGUSER"], env["PGPASSWORD"]) == ("postgres", "pw")
    assert (env["PGSSLMODE"], env["PGSSLROOTCERT"], env["PGCONNECT_TIMEOUT"]) == (
        "verify-full", "/etc/ca.pem", "5")


def fake_tools(directory: Path, **scripts: str) -> backup.ClientTools:
    """Shell scripts standing in for the client tools, by name."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, body in scripts.items():
        path = directory / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(0o755)
    return backup.ClientTools(directory)


async def test_psql_stopping_at_an_error_is_reported_and_nothing_waits_for_ever(
    tmp_path: Path,
) -> None:
    # pg_restore writes without end (far more than a pipe holds); psql fails after a
    # few lines.
    tools = fake_tools(
        tmp_path,
        pg_restore='exec yes "SELECT 1;"\n',
        psql='head -n 5 > /dev/null; echo "psql:<stdin>:5: ERROR:  boom" >&2; exit 3\n')

    with pytest.raises(backup.BackupFailed, match="ERROR:  boom"):
        await asyncio.wait_for(backup.restore("postgresql://u@/d", tmp_path / "x", tools), 30)


async def test_pg_restore_failing_is_reported_and_no_commit_is_sent(
    tmp_path: Path,
) -> None:
    received = tmp_path / "received.sql"
    tools = fake_tools(
        tmp_path,
        pg_restore='echo "COPY x FROM stdin;"; echo "pg_restore: error: could not read '
                   'input file: end of file" >&2; exit 1\n',
        psql=f'cat > {received}\n')

    with pytest.raises(backup.BackupFailed, match="pg_restore: error: could not read"):
        await backup.restore("postgresql://u@/d", tmp_path / "x", tools)
    sent = received.read_text()
    assert sent.startswith("SET client_min_messages = warning;\nBEGIN;\n")
    assert "COPY x FROM stdin;" in sent
    assert "COMMIT" not in sent
