"""One log line per interval for what comes in floods: a request's failure repeated by
every request while the database is away or full, a client refused again and again. A
line per request made 6,000 WARNING lines in a 40 s outage, on the disk it may share with
the database (a disk-full probe)."""

from __future__ import annotations

import time

EVERY_SECONDS = 10.0


class Throttle:
    """Counts occurrences; says when one is due a line, with the count it stands for."""

    def __init__(self, every_seconds: float = EVERY_SECONDS) -> None:
        self.every_seconds = every_seconds
        self._logged_at = -every_seconds
        self._unlogged = 0

    def due(self) -> int | None:
        """Count one; the count since the last line (this one included) if a line is due
        now, else None."""
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at < self.every_seconds:
            return None
        count, self._unlogged, self._logged_at = self._unlogged, 0, now
        return count
