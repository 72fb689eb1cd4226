"""A group whose COMMIT the database did not answer in time may have been applied: the
run's record must say what is really there, never "failed, left as it was" for a group
whose summary exists. Here the run connection's backend is stopped (SIGSTOP) as the
group's COMMIT is sent, and resumed once the client has given up on it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import Sequence
from typing import Any

import pytest

from app.consolidation.repository import GroupWriter
from app.consolidation.runs import CUT_OFF, fail_abandoned_runs
from app.resources import Resources
from tests.conftest import STATEMENT_BOUND, TenantKey, make_client, reconfigured
from tests.integration.consolidation.conftest import memory, seed, summaries
from tests.integration.test_commit_outcome import wait_gone


async def test_a_group_whose_commit_went_unanswered_is_recorded_as_it_really_is(
    resources: Resources, database_url: str, tenant: TenantKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stopped: list[int] = []
    add_progress = GroupWriter.add_progress

    async def then_stop(self: GroupWriter, run_id: uuid.UUID, **counts: Any) -> None:
        await add_progress(self, run_id, **counts)
        if counts.get("created") and not stopped:
            # The group's last statement has run: COMMIT is what the client sends next,
            # and the backend answers it only once resumed, after the client gave up.
            pid = self.connection.get_server_pid()
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
            asyncio.get_running_loop().call_later(2.0, os.kill, pid, signal.SIGCONT)

    monkeypatch.setattr(GroupWriter, "add_progress", then_stop)
    async with reconfigured(resources, database_url,
                            db_statement_timeout_seconds=STATEMENT_BOUND) as bounded, \
            make_client(bounded, tenant.headers) as client:
        ids = await seed(client, [memory(f"note {i} about the budget", i) for i in range(4)])
        try:
            answered = await client.post("/v1/consolidations", json={"user_id": "u1"})
        finally:
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
    monkeypatch.undo()
    assert stopped, "no group was written"
    await asyncio.to_thread(wait_gone, stopped[0])
    await fail_abandoned_runs(resources.sessionmaker)  # what the minute's sweep does
    async with make_client(resources, tenant.headers) as client:
        written = await summaries(client, user_id="u1")
        run = (await client.get("/v1/consolidations")).json()["items"][0]
        archived = await archived_ids(client, ids)

    # The backend, resumed, applied the COMMIT it had been sent: the group is there.
    assert len(written) == 1, written
    assert archived == sorted(written[0]["summary_of"])
    # The request could not know: the group's transaction held the run's record.
    assert answered.status_code == 503, answered.text
    problem = answered.json()
    assert problem["type"].endswith("/outcome_unknown")
    assert f"read GET /v1/consolidations/{run['id']} before running it again" \
        in problem["detail"]
    # The record, settled once the backend was gone, says what is really there.
    assert run["status"] == "failed", run
    assert run["error"] == CUT_OFF
    recorded = {g["summary_id"]: sorted(g["removed_ids"]) for g in run["groups"]
                if g["outcome"] == "written"}
    assert recorded == {written[0]["id"]: archived}, run["groups"]


async def archived_ids(client: Any, ids: Sequence[str]) -> list[str]:
    out = []
    for memory_id in ids:
        got = (await client.get(f"/v1/memories/{memory_id}")).json()
        if got["archived_at"] is not None:
            out.append(memory_id)
    return sorted(out)
