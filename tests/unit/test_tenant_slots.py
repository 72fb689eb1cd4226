"""A tenant's share of the requests in flight (app/tenants/concurrency.py)."""

from __future__ import annotations

import uuid

from app.tenants.concurrency import TenantSlots

A, B = uuid.uuid4(), uuid.uuid4()


def test_a_tenant_gets_its_share_and_no_more_until_one_is_given_back() -> None:
    slots = TenantSlots(2)
    assert [slots.enter(A, 2) for _ in range(3)] == [True, True, False]
    assert slots.in_flight(A) == 2  # the refusal took nothing
    slots.leave(A)
    assert slots.enter(A, 2)
    assert not slots.enter(A, 2)


def test_tenants_have_shares_of_their_own() -> None:
    slots = TenantSlots(1)
    assert slots.enter(A, 1)
    assert not slots.enter(A, 1)
    assert slots.enter(B, 1)
    assert slots.enter(B, 3)  # B's own share is larger
    assert slots.enter(B, 3)
    assert not slots.enter(B, 3)


def test_a_tenants_own_share_replaces_the_default() -> None:
    slots = TenantSlots(4)
    assert slots.limit_for(None) == 4
    assert slots.limit_for(10) == 10
    assert slots.limit_for(0) == 0


def test_a_lowered_share_refuses_until_enough_have_left() -> None:
    slots = TenantSlots(0)
    for _ in range(3):
        assert slots.enter(A, 5)
    assert not slots.enter(A, 2)
    slots.leave(A)
    slots.leave(A)
    assert slots.enter(A, 2)


def test_a_tenant_with_nothing_in_flight_is_not_kept() -> None:
    slots = TenantSlots(3)
    for _ in range(3):
        slots.enter(A, 3)
    slots.enter(B, 3)
    for _ in range(3):
        slots.leave(A)
    assert slots.in_flight(A) == 0
    assert len(slots) == 1
    slots.leave(B)
    assert len(slots) == 0


def test_no_bound_admits_everything_and_counts_nothing() -> None:
    slots = TenantSlots(0)
    assert all(slots.enter(A, 0) for _ in range(10_000))
    assert len(slots) == 0
