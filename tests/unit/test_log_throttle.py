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


async def test_a_shutdown_says_what_is_held_back_and_a_flush_is_no_requests() -> None:
    """A re-probe: failures held back when the service stopped mid-interval went unsaid,
    and a flushed line carried the id of the request that had set its timer."""
    import contextvars

    from app.log_throttle import flush_all

    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("rid", default="-")
    said: list[tuple[int, str]] = []
    throttle = Throttle(every_seconds=0.2,
                        flush=lambda count: said.append((count, request_id.get())))

    async def a_request() -> None:
        request_id.set("r-1")
        throttle.due()
        throttle.due()

    await asyncio.create_task(a_request())
    await asyncio.sleep(0.3)
    assert said == [(1, "-")]
    throttle.due()
    throttle.due()
    flush_all()
    assert said == [(1, "-"), (2, "-")]
    await asyncio.sleep(0.3)
    assert said == [(1, "-"), (2, "-")]  # said once, not again at the interval's end
