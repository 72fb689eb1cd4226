"""How many requests a tenant may make: a token bucket per tenant, in this process.

A tenant's agent stuck in a loop, or one team's batch job, would otherwise take every
slot the process has (app/service/admission.py) and every other tenant would see 503s.
The bucket holds `burst` tokens and refills at `per_second`; each request a tenant makes
takes one, and a request that finds none is refused with how long until one is there.
The limit is the service's default (settings) unless the tenant has its own (`python -m
app tenants limit`). Pure: no I/O, the clock is injected, so it is tested without waiting.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class RateLimit:
    """`per_second` 0 means no limit; `burst` is how many requests may come at once."""

    per_second: float
    burst: int

    @classmethod
    def of(cls, per_second: float, burst: int | None) -> RateLimit:
        """A burst of 0 or None is one second's worth of requests, at least one."""
        if per_second > 0 and not burst:
            burst = max(1, math.ceil(per_second))
        return cls(per_second, burst or 0)

    @property
    def unlimited(self) -> bool:
        return self.per_second <= 0

    def describe(self) -> str:
        if self.unlimited:
            return "no limit"
        return f"{self.per_second:g} requests/s, bursts of {self.burst}"


NO_LIMIT = RateLimit(0.0, 0)

# The slowest rate a limit may have, one request a day: slower is no rate but a ban
# (suspend the tenant), and at 5e-324 a token's wait overflowed to infinity, whose
# Retry-After answered 500 (a settings probe). A stored slower rate (set before this
# bound) waits at most this long.
MIN_PER_SECOND = 1 / 86400
MAX_WAIT_SECONDS = 86400.0


def rate_problem(per_second: float) -> str | None:
    """Why `per_second` is no rate limit's, if it is not: 0 (none) or one a day to 1e6."""
    if per_second == 0 or MIN_PER_SECOND <= per_second <= 1_000_000:
        return None
    return ("must be 0 (no limit) or from one request a day "
            f"({MIN_PER_SECOND:.3g}/s) to 1000000 requests/s")

# A client keeping exactly to the rate finds its token a rounding error short.
_EPSILON = 1e-9


class _Bucket:
    __slots__ = ("at", "full_at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at
        self.full_at = at


class TenantRateLimiter:
    """The buckets of every tenant that called this process. Each `take` is atomic under
    asyncio (no await inside), so concurrent requests of one tenant never share a token."""

    # Above this many buckets, the full ones are dropped: a full bucket and no bucket
    # admit alike, so forgetting them changes nothing, and deleted tenants do not pile up.
    PRUNE_ABOVE = 10_000

    def __init__(self, default: RateLimit, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.default = default
        self._clock = clock
        self._buckets: dict[uuid.UUID, _Bucket] = {}

    def limit_for(self, own: RateLimit | None) -> RateLimit:
        return self.default if own is None else own

    def take(self, tenant_id: uuid.UUID, limit: RateLimit) -> float:
        """Take one token of the tenant's bucket: 0.0 when there was one, else the seconds
        until there will be (the request is refused and takes nothing)."""
        if limit.unlimited:
            return 0.0
        now = self._clock()
        bucket = self._buckets.get(tenant_id)
        if bucket is None:
            if len(self._buckets) >= self.PRUNE_ABOVE:
                self._prune(now)
            bucket = self._buckets[tenant_id] = _Bucket(float(limit.burst), now)
        else:
            # A limit lowered since the last request applies at once (min), a raised one
            # refills from here.
            bucket.tokens = min(float(limit.burst),
                                bucket.tokens + (now - bucket.at) * limit.per_second)
            bucket.at = now
        if bucket.tokens >= 1.0 - _EPSILON:
            bucket.tokens = max(0.0, bucket.tokens - 1.0)
            bucket.full_at = now + (limit.burst - bucket.tokens) / limit.per_second
            return 0.0
        return min((1.0 - bucket.tokens) / limit.per_second, MAX_WAIT_SECONDS)

    def _prune(self, now: float) -> None:
        for tenant_id in [t for t, b in self._buckets.items() if b.full_at <= now]:
            del self._buckets[tenant_id]

    def __len__(self) -> int:
        return len(self._buckets)
