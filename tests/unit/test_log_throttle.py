"""The throttle of log lines that come in floods (app/log_throttle.py)."""

from __future__ import annotations

import time

from app.log_throttle import Throttle


def test_the_first_is_due_at_once_then_one_line_an_interval_counting_the_rest() -> None:
    throttle = Throttle(every_seconds=0.2)

    assert throttle.due() == 1
    assert [throttle.due() for _ in range(4)] == [None] * 4
    time.sleep(0.25)
    assert throttle.due() == 5  # the four held back and this one
    assert throttle.due() is None
