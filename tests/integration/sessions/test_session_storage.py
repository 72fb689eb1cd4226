"""How sessions are stored: appends update the session row in place (HOT), and the flag
the sweep reads is set when a fold is due and cleared when none is."""

from __future__ import annotations

import re

import httpx
import pytest
from sqlalchemy import text

from app.resources import Resources
from app.sessions import folder as folder_module
from app.sessions.jobs import requeue_stalled_folds
from tests.conftest import TenantKey, make_client
from tests.integration.sessions.conftest import (
    SMALL,
    append,
    flagged,
    fold,
    fold_due_since,
    new_id,
    with_settings,
)

# What an append while no fold is due changes in the session row (app/sessions/repository.py
# append(); lock_or_create's lock changes no column). It writes user_id and agent_id too,
# but the values they already have once set (an unchanged value keeps an update HOT).
APPEND_CHANGES = ("turn_count", "updated_at")


async def test_no_index_covers_a_column_an_append_changes(resources: Resources) -> None:
    """An update that changes an indexed column cannot be HOT: each append would write an
    index entry and leave a dead row version behind (0 HOT updates of ~8,800 in
    bench/sessions.py when the turn count was indexed)."""
    async with resources.engine.connect() as conn:
        definitions = (await conn.execute(text(
            "SELECT pg_get_indexdef(indexrelid) FROM pg_index"
            " WHERE indrelid = 'sessions'::regclass"))).scalars().all()
        options = await conn.scalar(text(
            "SELECT reloptions FROM pg_class WHERE oid = 'sessions'::regclass"))
    assert len(definitions) >= 2  # the primary key and the fold-due flag at least
    for definition in definitions:
        covered = definition.split(" USING ", 1)[1]
        assert not [c for c in APPEND_CHANGES if re.search(rf"\b{c}\b", covered)], definition
    # Room on each page for the new version of a row, which a HOT update needs.
    assert options == ["fillfactor=70"]


async def test_the_fold_due_flag_follows_the_backlog(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    for i in range(5):
        await append(small_client, sid, f"turn {i}")
    assert await fold_due_since(small, tenant, sid) is None

    await append(small_client, sid, "the sixth: a fold is due")
    since = await fold_due_since(small, tenant, sid)
    assert since is not None
    assert (tenant.tenant_id, sid) in await flagged(small)
    for i in range(4):  # 10 unsummarised: two folds due, the flag keeps its time
        await append(small_client, sid, f"more {i}")
    assert await fold_due_since(small, tenant, sid) == since

    assert (await fold(small, tenant, sid)).folds == 2
    assert await fold_due_since(small, tenant, sid) is None
    assert (tenant.tenant_id, sid) not in await flagged(small)


async def test_a_fold_that_leaves_one_due_keeps_the_flag(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sid = new_id()
    for i in range(10):  # two folds due
        await append(small_client, sid, f"turn {i}")
    # One fold, then stop: as a job cut off between two folds.
    monkeypatch.setattr(folder_module, "MAX_FOLDS_PER_JOB", 1)

    outcome = await fold(small, tenant, sid)

    assert (outcome.folds, outcome.more) == (1, True)
    assert await fold_due_since(small, tenant, sid) is not None


async def test_sessions_with_nothing_due_are_never_flagged(
    resources: Resources, tenant: TenantKey,
) -> None:
    sid = new_id()
    res = with_settings(resources, **{**SMALL, "session_strategy": "truncation"})
    async with make_client(res, tenant.headers) as client:
        for i in range(12):
            await append(client, sid, f"turn {i}")
    assert await fold_due_since(res, tenant, sid) is None


async def test_a_flag_with_nothing_due_is_cleared_by_the_fold(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    for i in range(3):
        await append(small_client, sid, f"turn {i}")
    # As migration 0016 flags every session with unsummarised turns, or after the
    # threshold was raised: the sweep queues a fold, which finds nothing to do.
    async with small.engine.begin() as conn:
        await conn.execute(text("UPDATE sessions SET fold_due_since = now()"
                                " WHERE tenant_id = :t AND session_id = :s"),
                           {"t": tenant.tenant_id, "s": sid})
    assert await requeue_stalled_folds(small) >= 1

    assert (await fold(small, tenant, sid)).folds == 0
    assert await fold_due_since(small, tenant, sid) is None
