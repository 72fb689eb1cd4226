"""The throttle of log lines that come in floods (app/log_throttle.py)."""

from __future__ import annotations

import asyncio
import time

from app.log_throttle import Throttle


def test_the_first_is_due_at_once_then_one_line_an_interval_counting_the_rest() -> None:
    throttle = Throttle(every_seconds=0.2)

    assert throttle.due() == 1
    assert [throttle.due() for _ in range(4)] == [None] * 4
    time.sleep(0.25)
    assert throttle.due() == 5  # the four held back and this one
    assert throttle.due() is None


async def test_what_an_interval_held_back_is_said_at_its_end() -> None:
    """A re-probe: three failures, then quiet, left two of them unsaid for good."""
    said: list[int] = []
    throttle = Throttle(every_seconds=0.2, flush=said.append)

    assert throttle.due() == 1
    assert throttle.due() is None
    assert throttle.due() is None
    await asyncio.sleep(0.3)

    assert said == [2]
    assert throttle.due() is None  # the flush was a line: a new interval began with it
    await asyncio.sleep(0.3)
    assert said == [2, 1]
