"""One log line per interval for what comes in floods: a request's failure repeated by
every request while the database is away or full, a client refused again and again. A
line per request made 6,000 WARNING lines in a 40 s outage, on the disk it may share with
the database (a disk-full probe).

What an interval held back is said at its end (`flush`), not only when the next one comes:
three failed requests and then quiet had left two of them unsaid for good (a re-probe)."""

from __future__ import annotations

import asyncio
import contextvars
import time
import weakref
from collections.abc import Callable

EVERY_SECONDS = 10.0
# Every throttle with a flush, for `flush_all` at shutdown.
_FLUSHED: weakref.WeakSet[Throttle] = weakref.WeakSet()


class Throttle:
    """Counts occurrences; says when one is due a line, with the count it stands for."""

    def __init__(self, every_seconds: float = EVERY_SECONDS,
                 flush: Callable[[int], None] | None = None) -> None:
        self.every_seconds = every_seconds
        self._flush = flush
        self._logged_at = -every_seconds
        self._unlogged = 0
        self._flushing: asyncio.TimerHandle | None = None
        self._flush_loop: asyncio.AbstractEventLoop | None = None
        if flush is not None:
            _FLUSHED.add(self)

    def due(self) -> int | None:
        """Count one; the count since the last line (this one included) if a line is due
        now, else None (and, with a `flush`, the count is said at the interval's end)."""
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at < self.every_seconds:
            self._flush_later(self._logged_at + self.every_seconds - now)
            return None
        count, self._unlogged, self._logged_at = self._unlogged, 0, now
        return count

    def _flush_later(self, seconds: float) -> None:
        if self._flush is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: said with the next line instead
            return
        if self._flushing is not None and self._flush_loop is loop:
            return  # one is due already (one set on a loop since closed never runs)
        # In a context of its own: the request that set it is long over when it runs,
        # and its line carried that request's id (a re-probe).
        self._flushing = loop.call_later(seconds, self._flush_now,
                                         context=contextvars.Context())
        self._flush_loop = loop

    def _flush_now(self) -> None:
        if self._flushing is not None:
            self._flushing.cancel()
        self._flushing = None
        if self._unlogged and self._flush is not None:
            count, self._unlogged, self._logged_at = self._unlogged, 0, time.monotonic()
            self._flush(count)


def flush_all() -> None:
    """Say what every throttle holds back now: at shutdown, whose interval would not end
    (an outage's failures before a restart went unsaid; a re-probe)."""
    for throttle in list(_FLUSHED):
        throttle._flush_now()
