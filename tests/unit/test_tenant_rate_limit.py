"""The per-tenant token buckets (app/tenants/rate_limit.py) on a clock the test moves."""

from __future__ import annotations

import uuid

import pytest

from app.tenants.rate_limit import (
    MAX_WAIT_SECONDS,
    MIN_PER_SECOND,
    NO_LIMIT,
    RateLimit,
    TenantRateLimiter,
    rate_problem,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


A, B = uuid.uuid4(), uuid.uuid4()


def limiter(per_second: float = 2.0, burst: int = 3) -> tuple[TenantRateLimiter, Clock]:
    clock = Clock()
    return TenantRateLimiter(RateLimit.of(per_second, burst), clock=clock), clock


def admitted(lim: TenantRateLimiter, tenant: uuid.UUID, n: int, limit: RateLimit) -> int:
    return sum(lim.take(tenant, limit) == 0.0 for _ in range(n))


def test_a_burst_is_admitted_at_once_and_the_next_request_is_told_when_to_come_back() -> None:
    lim, _ = limiter(2.0, 3)
    assert [lim.take(A, lim.default) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert lim.take(A, lim.default) == pytest.approx(0.5)  # one token at 2/s
    assert lim.take(A, lim.default) == pytest.approx(0.5)  # a refusal takes nothing


def test_tokens_come_back_at_the_rate_and_never_beyond_the_burst() -> None:
    lim, clock = limiter(2.0, 3)
    assert admitted(lim, A, 3, lim.default) == 3
    clock.now += 0.25  # half a token
    assert lim.take(A, lim.default) == pytest.approx(0.25)
    clock.now += 0.25
    assert admitted(lim, A, 2, lim.default) == 1
    clock.now += 3600  # an hour idle refills to the burst, not 7,200
    assert admitted(lim, A, 10, lim.default) == 3


def test_a_steady_client_at_the_rate_is_never_refused() -> None:
    lim, clock = limiter(10.0, 1)
    for _ in range(1000):
        assert lim.take(A, lim.default) == 0.0
        clock.now += 0.1


def test_tenants_have_buckets_of_their_own() -> None:
    lim, _ = limiter(1.0, 2)
    assert admitted(lim, A, 5, lim.default) == 2
    assert admitted(lim, B, 5, lim.default) == 2


def test_a_tenants_own_limit_replaces_the_default_and_zero_is_no_limit() -> None:
    lim, _ = limiter(1.0, 1)
    own = RateLimit.of(100.0, 50)
    assert lim.limit_for(None) == lim.default
    assert lim.limit_for(own) == own
    assert admitted(lim, A, 60, lim.limit_for(own)) == 50
    unlimited = RateLimit.of(0.0, None)
    assert unlimited.unlimited
    assert unlimited == NO_LIMIT
    assert admitted(lim, B, 10_000, unlimited) == 10_000
    assert len(lim) == 1  # no bucket kept for an unlimited tenant


def test_a_lowered_limit_applies_at_the_next_request() -> None:
    lim, clock = limiter(100.0, 100)
    assert admitted(lim, A, 10, lim.default) == 10
    lowered = RateLimit.of(1.0, 2)
    assert admitted(lim, A, 5, lowered) == 2
    clock.now += 1.0
    assert admitted(lim, A, 5, lowered) == 1


def test_a_burst_left_out_is_one_seconds_worth_at_least_one() -> None:
    assert RateLimit.of(20.0, None) == RateLimit(20.0, 20)
    assert RateLimit.of(2.5, 0) == RateLimit(2.5, 3)
    assert RateLimit.of(0.1, None) == RateLimit(0.1, 1)
    assert RateLimit.of(5.0, 12) == RateLimit(5.0, 12)
    assert RateLimit.of(0.1, None).describe() == "0.1 requests/s, bursts of 1"
    assert NO_LIMIT.describe() == "no limit"


def test_a_slow_rate_says_a_long_wait() -> None:
    lim, _ = limiter(0.1, 1)
    assert lim.take(A, lim.default) == 0.0
    assert lim.take(A, lim.default) == pytest.approx(10.0)


def test_full_buckets_are_forgotten_once_there_are_many(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(TenantRateLimiter, "PRUNE_ABOVE", 4)
    lim, clock = limiter(1.0, 2)
    tenants = [uuid.uuid4() for _ in range(4)]
    for t in tenants:
        assert lim.take(t, lim.default) == 0.0
    assert len(lim) == 4
    clock.now += 0.5  # none refilled yet: nothing is forgotten, the new one is added
    assert lim.take(B, lim.default) == 0.0
    assert len(lim) == 5
    clock.now += 1.0  # the first four are full again; B is not
    assert admitted(lim, B, 1, lim.default) == 1
    newcomer = uuid.uuid4()
    assert lim.take(newcomer, lim.default) == 0.0
    assert len(lim) == 2  # B and the newcomer
    # A forgotten tenant starts from a full bucket, as it would have had.
    assert admitted(lim, tenants[0], 3, lim.default) == 2


@pytest.mark.parametrize("per_second", [5e-324, 1e-300, 1e-9])
def test_a_wait_is_at_most_a_day_however_slow_the_rate(per_second: float) -> None:
    """1/5e-324 is infinity, whose Retry-After answered 500 (a settings probe)."""
    lim, _ = limiter(per_second, 1)
    assert lim.take(A, lim.default) == 0.0
    assert lim.take(A, lim.default) == MAX_WAIT_SECONDS == 86400.0


@pytest.mark.parametrize(("per_second", "ok"), [
    (0.0, True), (MIN_PER_SECOND, True), (1.0, True), (1_000_000.0, True),
    (MIN_PER_SECOND / 2, False), (5e-324, False), (-1.0, False), (1_000_001.0, False)])
def test_a_rate_is_none_or_one_a_day_to_a_million(per_second: float, ok: bool) -> None:
    assert (rate_problem(per_second) is None) is ok
