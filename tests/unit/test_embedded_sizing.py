"""The embedded server's memory sizing: from the machine, or from its container's limit."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.embedded_db import _machine_memory_mb, default_sizing


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
