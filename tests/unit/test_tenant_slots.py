"""A tenant's share of the requests in flight (app/tenants/concurrency.py)."""

from __future__ import annotations

import uuid

from app.tenants.concurrency import TenantSlots

A, B = uuid.uuid4(), uuid.uuid4()


def test_a_tenant_gets_its_share_and_no_more_until_one_is_given_back() -> None:
    slots = TenantSlots(2)
    assert [slots.enter(A) for _ in range(3)] == [True, True, False]
    assert slots.in_flight(A) == 2  # the refusal took nothing
    slots.leave(A)
    assert slots.enter(A)
    assert not slots.enter(A)


def test_tenants_have_shares_of_their_own() -> None:
    slots = TenantSlots(1)
    assert slots.enter(A)
    assert not slots.enter(A)
    assert slots.enter(B)


def test_a_tenant_with_nothing_in_flight_is_not_kept() -> None:
    slots = TenantSlots(3)
    for _ in range(3):
        slots.enter(A)
    slots.enter(B)
    for _ in range(3):
        slots.leave(A)
    assert slots.in_flight(A) == 0
    assert len(slots) == 1
    slots.leave(B)
    assert len(slots) == 0


def test_no_bound_admits_everything_and_counts_nothing() -> None:
    slots = TenantSlots(0)
    assert all(slots.enter(A) for _ in range(10_000))
    assert len(slots) == 0
    slots.leave(A)
    assert slots.in_flight(A) == 0
