"""The database URL as the environment libpq's tools (pg_dump, pg_restore, psql) read."""

from __future__ import annotations

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
