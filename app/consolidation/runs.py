"""A run from start to finish: lock the scope, record the run, read the candidates, plan,
run the ops with no transaction open, write each group, record the outcome.

`run_now` runs in the caller's task (a synchronous POST, an automatic job);
`run_queued` runs a run an async POST recorded and queued. Both keep the scope's
advisory lock for the whole run, so two runs on one scope never interleave.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select

from app.consolidation.composite import GroupOutcome
from app.consolidation.config import SimilarityClusterConfig
from app.consolidation.executor import GroupExecutor, planned_group, previewed_group
from app.consolidation.locks import ScopeLock, run_lock_key
from app.consolidation.registry import Composition
from app.consolidation.repository import (
    ConsolidationRepository,
    GroupWriter,
    fail_abandoned,
    fail_never_started,
)
from app.consolidation.schemas import ConsolidationGroup, ConsolidationRequest
from app.consolidation.stored import request_to_run
from app.consolidation.txn import RunTransactions
from app.consolidation.types import OpContext
from app.errors import (
    DATABASE_FAILURES,
    Conflict,
    DatabaseUnavailable,
    NotFound,
    error_line,
    is_connection_failure,
)
from app.ids import uuid7
from app.models import ConsolidationRun
from app.resources import Resources
from app.service import request_id
from app.service.metrics import CONSOLIDATION_RUNS

log = logging.getLogger("engram.consolidation")

RUN_JOB = "consolidation.run"
"""The job that runs a queued (`async: true`) run; its payload names the run."""

CUT_OFF = ("the run was cut off (the process running it stopped or crashed, or its "
           "database connection stopped answering); groups it committed stay committed")
NEVER_STARTED = ("the run never started: its queued job ended without running it (every "
                 "try failed; the worker's log says why); nothing was changed")


class ScopeBusy(Conflict):
    """Another run holds the scope's lock."""


class RunGone(NotFound):
    """The run's record is gone: its tenant was deleted (the record with it) meanwhile."""

    def __init__(self, run_id: uuid.UUID) -> None:
        super().__init__(f"consolidation run {run_id} is gone: its tenant was deleted while "
                         "it ran, and with it whatever the run wrote")


def composition_record(composition: Composition) -> dict[str, Any]:
    return {"strategy": composition.strategy,
            "selector": composition.selector_config.model_dump(mode="json"),
            "op": composition.op_config.model_dump(mode="json")}


def _cause(exc: BaseException) -> str:
    """What a failed run's `error` says: the first error itself, not the task group (the
    ops of a run's groups run in one) that it surfaced through."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return error_line(exc)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


class ConsolidationRunner:
    def __init__(self, resources: Resources, tenant_id: uuid.UUID) -> None:
        self.resources = resources
        self.tenant_id = tenant_id

    async def busy_error(self, key: int) -> ScopeBusy:
        async with self.resources.sessionmaker() as session:
            holder = await session.scalar(
                select(ConsolidationRun.id).where(
                    ConsolidationRun.tenant_id == self.tenant_id,
                    ConsolidationRun.lock_key == key, ConsolidationRun.status == "running",
                    ConsolidationRun.lock_pid.is_not(None)).limit(1))
        which = f" ({holder})" if holder else ""
        return ScopeBusy(f"another consolidation run{which} is running on this scope; "
                         "runs on one scope never interleave, retry when it has finished")

    async def run_now(self, request: ConsolidationRequest, composition: Composition,
                      *, trigger: str = "api",
                      on_cut: Callable[[str], None] | None = None) -> ConsolidationRun:
        """Run to the end and return the record. A busy scope raises `ScopeBusy` (409).
        Cut by the shutdown, the run tells `on_cut` what its caller should be told: the
        groups written stay, and the run's record says which."""
        run_id = uuid7()
        key = run_lock_key(self.tenant_id, request, run_id)
        lock = ScopeLock(self.resources.engine, key)
        connection = await lock.try_acquire()
        if connection is None:
            raise await self.busy_error(key)
        try:
            tx = RunTransactions(connection)
            async with tx.begin() as session:
                await ConsolidationRepository(session, self.tenant_id).insert_run(run_values(
                    request, composition, key, trigger, run_id=run_id, pid=lock.pid))
            try:
                final = await self._execute(tx, run_id, request, composition)
                return final or await self.load(run_id)
            except asyncio.CancelledError:
                if on_cut is not None:
                    on_cut(f"the service is shutting down and stopped consolidation run "
                           f"{run_id} before it finished; the groups it wrote stay written "
                           "(each in its own transaction), and the run is marked failed: "
                           f"read GET /v1/consolidations/{run_id} before running it again")
                raise
            except DATABASE_FAILURES as exc:
                if not is_connection_failure(exc):
                    raise
                # Not the bare "retry later" of a request that changed nothing: the groups
                # written before stay written, and the caller needs the run to see which.
                raise DatabaseUnavailable(
                    f"the database became unreachable during consolidation run {run_id}; "
                    "the groups it wrote before stay written (each in its own "
                    "transaction), and the run is marked failed within a minute of the "
                    f"database's return: read GET /v1/consolidations/{run_id} then, "
                    "before running it again") from exc
        finally:
            await lock.release()

    async def run_queued(self, run_id: uuid.UUID, composition: Composition) -> None:
        """Run a queued run. Raises `ScopeBusy` while another run holds the scope."""
        run = await self.load(run_id)
        if run.status != "running":
            return  # finished or failed already: a duplicate delivery
        if run.started_at is not None:
            await self.settle_started(run)
            return
        request = request_to_run(run.request)
        lock = ScopeLock(self.resources.engine, run.lock_key)
        connection = await lock.try_acquire()
        if connection is None:
            if (await self.load(run_id)).started_at is not None:
                return  # another delivery started it meanwhile and holds its scope
            raise await self.busy_error(run.lock_key)
        try:
            tx = RunTransactions(connection)
            async with tx.begin() as session:
                claimed = await ConsolidationRepository(session, self.tenant_id).update_run(
                    run_id, {"started_at": func.now(), "lock_pid": lock.pid},
                    only_if_status="running")
            if claimed:
                await self._execute(tx, run_id, request, composition)
        finally:
            await lock.release()

    async def settle_started(self, run: ConsolidationRun) -> None:
        """A started run delivered again (its worker died, or stalled past the queue's
        heartbeat): cut off if that worker is gone, its scope lock free; left to it if it
        still holds the scope."""
        lock = ScopeLock(self.resources.engine, run.lock_key)
        if await lock.try_acquire() is None:
            return
        try:
            await self._fail(run.id, CUT_OFF)
        finally:
            await lock.release()

    async def give_up(self, run_id: uuid.UUID, error: str) -> None:
        await self._fail(run_id, error)

    async def load(self, run_id: uuid.UUID) -> ConsolidationRun:
        async with self.resources.sessionmaker() as session:
            run = await ConsolidationRepository(session, self.tenant_id).get_run(run_id)
        if run is None:
            raise RunGone(run_id)
        return run

    async def _execute(self, tx: RunTransactions, run_id: uuid.UUID,
                       request: ConsolidationRequest,
                       composition: Composition) -> ConsolidationRun | None:
        """The finished run; None when it failed on an error (then marked failed)."""
        try:
            return await self._phases(tx, run_id, request, composition)
        except asyncio.CancelledError:
            await asyncio.shield(self._fail(run_id, CUT_OFF))
            raise
        except RunGone:
            # Not a failure of the run's: there is nothing left to mark failed.
            log.info("consolidation run %s: its tenant was deleted while it ran", run_id)
            return None
        except Exception as exc:
            log.exception("consolidation run %s failed", run_id)
            await self._fail(run_id, _cause(exc)[:1000])
            return None

    async def _phases(self, tx: RunTransactions, run_id: uuid.UUID,
                      request: ConsolidationRequest,
                      composition: Composition) -> ConsolidationRun:
        started = time.perf_counter()
        async with tx.begin() as session:
            candidates = await ConsolidationRepository(session, self.tenant_id).candidates(
                request, limit=self.resources.settings.consolidation_scan_limit,
                with_embeddings=isinstance(composition.selector_config,
                                           SimilarityClusterConfig),
                partitioning=composition.partitioning)
        selected = time.perf_counter()
        groups = await asyncio.to_thread(composition.composite.plan, candidates.entries)
        planned = time.perf_counter()
        state = "planned" if request.dry_run else "pending"
        records = [planned_group(g, request.mode, state) for g in groups]
        progress: dict[str, Any] = {
            "groups": [r.model_dump(mode="json") for r in records],
            "groups_total": len(groups), "candidates": len(candidates.entries),
            "remainder": candidates.remainder,
        }
        timings = {"candidates_ms": _ms(selected - started), "plan_ms": _ms(planned - selected)}
        if request.dry_run:
            if not composition.requires_llm:
                # Cheap and deterministic: the plan then says what the run would fold.
                async def preview(index: int, outcome: GroupOutcome) -> None:
                    records[index] = await self._previewed(tx, outcome, request.mode)

                await composition.composite.summarize(groups, OpContext(llm=None), preview)
                progress["groups"] = [r.model_dump(mode="json") for r in records]
                timings["execute_ms"] = _ms(time.perf_counter() - planned)
            timings["total_ms"] = _ms(time.perf_counter() - started)
            return await self._finish_with(tx, run_id, {
                **progress, "status": "planned", "timings": timings,
                "finished_at": func.now()})
        await self._update(tx, run_id, progress)
        executor = GroupExecutor(self.resources, tx, self.tenant_id, run_id, request,
                                 candidates.snapshots)

        async def on_outcome(index: int, outcome: GroupOutcome) -> None:
            records[index] = await executor.apply(outcome)

        await composition.composite.summarize(groups, OpContext(llm=self.resources.llm),
                                              on_outcome)
        done = time.perf_counter()
        timings |= {"execute_ms": _ms(done - planned), "write_ms": _ms(executor.write_seconds),
                    "total_ms": _ms(done - started)}
        return await self._finish(tx, run_id, records, timings)

    async def _previewed(self, tx: RunTransactions, outcome: GroupOutcome,
                         mode: str) -> ConsolidationGroup:
        """A dry run's group, with the summaries an archive of its sources would fold as
        they stand now (GroupWriter.superseded_summaries)."""
        record = previewed_group(outcome, mode)
        if mode != "archive" or not record.removed_ids:
            return record
        async with tx.driver(transaction=False) as connection:
            superseded = await GroupWriter(connection, self.tenant_id).superseded_summaries(
                record.removed_ids, record.kept_id, lock=False)
        represented = [*record.removed_ids, *superseded]
        return record.model_copy(update={"removed_ids": represented,
                                         "folded_ids": represented})

    async def _finish(self, tx: RunTransactions, run_id: uuid.UUID,
                      records: list[ConsolidationGroup],
                      timings: dict[str, float]) -> ConsolidationRun:
        failed = sum(1 for r in records if r.outcome == "failed")
        error = (f"{failed} of {len(records)} groups failed; each was left exactly as it was"
                 if failed else None)
        return await self._finish_with(tx, run_id, {
            "status": "failed" if failed else "succeeded", "error": error,
            "groups": [r.model_dump(mode="json") for r in records], "timings": timings,
            "finished_at": func.now(),
        })

    async def _update(self, tx: RunTransactions, run_id: uuid.UUID,
                      values: dict[str, Any]) -> None:
        async with tx.begin() as session:
            await ConsolidationRepository(session, self.tenant_id).update_run(run_id, values)

    async def _finish_with(self, tx: RunTransactions, run_id: uuid.UUID,
                           values: dict[str, Any]) -> ConsolidationRun:
        """The run's last write, flushed to disk (and with it every earlier one)."""
        async with tx.begin(durable=True) as session:
            run = await ConsolidationRepository(session, self.tenant_id).finish_run(
                run_id, values)
        if run is None:
            raise RunGone(run_id)
        CONSOLIDATION_RUNS.labels(run.trigger, run.status).inc()
        return run

    async def _fail(self, run_id: uuid.UUID, error: str) -> None:
        """Mark a run failed, its groups rebuilt from the summaries it really wrote.

        On a pooled connection: the run's own may be what failed (or was cancelled)."""
        try:
            async with self.resources.sessionmaker() as session, session.begin():
                repo = ConsolidationRepository(session, self.tenant_id)
                run = await repo.get_run(run_id, for_update=True)
                if run is None or run.status != "running":
                    return
                groups = reconcile_groups(run, await repo.summaries_of_run(run_id))
                await repo.update_run(run_id, {"status": "failed", "error": error,
                                               "groups": groups, "finished_at": func.now()})
            CONSOLIDATION_RUNS.labels(run.trigger, "failed").inc()
        except Exception:
            log.exception("could not mark consolidation run %s failed; the crash sweep will",
                          run_id)


def run_values(request: ConsolidationRequest, composition: Composition, key: int,
               trigger: str, *, run_id: uuid.UUID, pid: int | None) -> dict[str, Any]:
    """A new run's row. Without a lock holder (`pid`) it is queued: not started yet."""
    return {
        "id": run_id, "status": "running", "mode": request.mode, "dry_run": request.dry_run,
        "trigger": trigger, "request": request.model_dump(mode="json", by_alias=True),
        "composition": composition_record(composition), "lock_key": key, "lock_pid": pid,
        "started_at": func.now() if pid is not None else None,
        "request_id": request_id.current(),
    }


def reconcile_groups(run: ConsolidationRun,
                     summaries: list[tuple[uuid.UUID, str, list[Any]]]) -> list[dict[str, Any]]:
    """The run's groups after a crash. The memories table is the truth, each group having
    committed whole: a pending group whose sources a summary of the run covers was
    written; the others never were."""
    written = {str(source): (summary_id, of) for summary_id, _, of in summaries
               for source in of}
    out = []
    for raw in run.groups:
        group = ConsolidationGroup.model_validate(raw)
        if group.outcome == "pending":
            hit = next((written[str(i)] for i in group.folded_ids if str(i) in written), None)
            if hit is not None:
                summary_id, of = hit
                group = group.model_copy(update={
                    "outcome": "written", "summary_id": summary_id, "folded_ids": of,
                    "removed_ids": of if run.mode == "archive" else []})
            else:
                group = group.model_copy(update={
                    "outcome": "failed", "error": "cut_off", "removed_ids": [],
                    "folded_ids": []})
        out.append(group.model_dump(mode="json"))
    return out


async def fail_abandoned_runs(sessionmaker: Any) -> int:
    """Mark failed every started run whose lock is no longer held by its holder (the
    process died), and rebuild its groups from what it committed; and every queued run
    whose job ended without starting it, which wrote nothing."""
    async with sessionmaker() as session, session.begin():
        never_started = await fail_never_started(session, NEVER_STARTED, RUN_JOB)
    for tenant_id, run_id, trigger in never_started:
        CONSOLIDATION_RUNS.labels(trigger, "failed").inc()
        log.warning("consolidation run %s of tenant %s never started: its job is gone",
                    run_id, tenant_id)
    async with sessionmaker() as session, session.begin():
        failed = await fail_abandoned(session, CUT_OFF)
    for tenant_id, run_id, trigger in failed:
        CONSOLIDATION_RUNS.labels(trigger, "failed").inc()
        async with sessionmaker() as session, session.begin():
            repo = ConsolidationRepository(session, tenant_id)
            run = await repo.get_run(run_id, for_update=True)
            if run is not None:
                groups = reconcile_groups(run, await repo.summaries_of_run(run_id))
                await repo.update_run(run_id, {"groups": groups})
    return len(failed) + len(never_started)
