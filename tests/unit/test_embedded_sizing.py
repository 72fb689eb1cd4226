"""The embedded server's memory sizing: from the machine, or from its container's limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.embedded_db import (
    PG_MAX_MAINTENANCE_MB,
    EmbeddedSettingRefused,
    _machine_memory_mb,
    _setting_kb,
    check_maintenance_work_mem,
    default_sizing,
)


def physical_mb() -> int:
    return _machine_memory_mb(())


@pytest.mark.parametrize(("content", "expected"), [
    pytest.param("max\n", None, id="v2-unlimited"),
    pytest.param("9223372036854771712\n", None, id="v1-unlimited"),
    pytest.param(f"{2 * 2**30}\n", 2048, id="two-gib"),
])
def test_a_containers_limit_bounds_the_memory_sized_from(
    tmp_path: Path, content: str, expected: int | None
) -> None:
    limit = tmp_path / "memory.max"
    limit.write_text(content)

    found = _machine_memory_mb((tmp_path / "absent", limit))

    assert found == (physical_mb() if expected is None else min(expected, physical_mb()))


def test_a_two_gib_container_gets_buffers_sized_for_two_gib(tmp_path: Path) -> None:
    # From the host's memory alone, a 2 GiB container on a 64 GiB host took 4 GiB.
    limit = tmp_path / "memory.limit_in_bytes"
    limit.write_text(str(2 * 2**30))

    mem = _machine_memory_mb((limit,))

    assert mem == min(2048, physical_mb())
    assert default_sizing(mem) == default_sizing(2048) == (256, 128)
    assert default_sizing(64 * 1024) == (4096, 2048)


def test_no_cgroup_files_leave_the_physical_memory(tmp_path: Path) -> None:
    assert _machine_memory_mb((tmp_path / "none",)) == physical_mb() > 0


def test_maintenance_memory_is_bounded_by_the_machines_and_by_postgresqls_range() -> None:
    check_maintenance_work_mem(2048, 2048)
    with pytest.raises(EmbeddedSettingRefused, match=(
            r"^ENGRAM_EMBEDDED_MAINTENANCE_WORK_MEM_MB=2049 is more than this machine's "
            r"2048 MiB; the embedded PostgreSQL takes at most 2048 MiB \(unset, 128 MiB\)$")):
        check_maintenance_work_mem(2049, 2048)
    check_maintenance_work_mem(PG_MAX_MAINTENANCE_MB, 2**23)
    with pytest.raises(EmbeddedSettingRefused, match="more than PostgreSQL's largest, 2097151"):
        check_maintenance_work_mem(PG_MAX_MAINTENANCE_MB + 1, 2**23)


@pytest.mark.parametrize(("shown", "kb"), [
    (" 1536MB\n", 1536 * 1024), ("1GB", 2**20), ("2TB", 2 * 2**30), ("1500kB", 1500),
    ("maintenance_work_mem\n----------------------\n 64MB\n(1 row)\n", 64 * 1024),
    ("", None),
])
def test_a_memory_setting_is_read_from_show_in_any_of_its_units(shown: str,
                                                                kb: int | None) -> None:
    assert _setting_kb(shown) == kb
