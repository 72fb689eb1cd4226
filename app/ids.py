"""Time-ordered UUIDs (version 7): new rows land at the right edge of the primary key.

Monotonic within a process (RFC 9562, method 3's spirit): an id made in the same
millisecond as the last (or with the clock stepped back) is the last plus one in its
random bits, so the ids of a batch, which share one `created_at`, list in the order
they were made rather than at random within each millisecond.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_RAND_B = (1 << 62) - 1
_lock = threading.Lock()
_last = 0


def _compose(ms: int, rand_a: int, rand_b: int) -> int:
    return ((ms & ((1 << 48) - 1)) << 80) | (0x7 << 76) | ((rand_a & 0xFFF) << 64) \
        | (0b10 << 62) | (rand_b & _RAND_B)


def uuid7() -> uuid.UUID:
    global _last
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = _compose(ms, rand >> 62, rand)
    with _lock:
        if value <= _last:
            last_ms, rand_a, rand_b = _last >> 80, (_last >> 64) & 0xFFF, _last & _RAND_B
            if rand_b < _RAND_B:
                rand_b += 1
            elif rand_a < 0xFFF:
                rand_a, rand_b = rand_a + 1, 0
            else:
                last_ms, rand_a, rand_b = last_ms + 1, 0, 0
            value = _compose(last_ms, rand_a, rand_b)
        _last = value
    return uuid.UUID(int=value)
