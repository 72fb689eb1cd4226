"""The rules of the consolidation endpoints: refuse what must not run, run or queue a run,
read runs, revert one."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import func
from sqlalchemy.ext.asyncio import AsyncSession

from app.consolidation.locks import lock_is_free, run_lock_key
from app.consolidation.registry import Composition, build_composition
from app.consolidation.repository import ConsolidationRepository, RunFilter
from app.consolidation.runs import RUN_JOB, ConsolidationRunner, run_values
from app.consolidation.schemas import (
    ConsolidationGroup,
    ConsolidationPage,
    ConsolidationProgress,
    ConsolidationRequest,
    ConsolidationResult,
    ConsolidationTimings,
)
from app.consolidation.stored import composition_to_show, request_to_show
from app.cursors import cut_page, decode_cursor, listing
from app.errors import Conflict, NotFound, OutcomeUnknown, ValidationFailed
from app.ids import uuid7
from app.models import ConsolidationRun
from app.resources import Resources
from app.worker.queue import enqueue

GUARD = ("name a scope (user_id, agent_id, session_id, namespace) or a criterion (tags, "
         "categories, metadata, older_than_seconds, created_after, created_before, "
         "max_importance below 1): without one the run would fold the whole tenant")


def compose(request: ConsolidationRequest, resources: Resources) -> Composition:
    """The request's composition, or a 422 naming the field that cannot work."""
    if not request.has_scope() and not request.has_criteria():
        raise ValidationFailed.on("body", GUARD)
    try:
        composition = build_composition(
            request.strategy, selector=request.selector, op=request.op,
            group_threshold=request.group_threshold,
            max_concurrency=resources.settings.llm_max_concurrency)
    except ValueError as exc:
        raise ValidationFailed.on("selector" if request.selector else "strategy",
                                  str(exc)) from exc
    if composition.requires_llm and resources.llm is None:
        field = "op" if request.op is not None else "strategy"
        what = (f"op {composition.op_config.name!r}" if request.op is not None
                else f"strategy {request.strategy!r}")
        raise ValidationFailed.on(field, f"{what} needs an LLM and none is configured "
                                  "(set ENGRAM_LLM_BASE_URL); the simple strategy and the "
                                  "extractive op work without one")
    return composition


def to_result(run: ConsolidationRun) -> ConsolidationResult:
    return ConsolidationResult(
        id=run.id, status=run.status,
        groups=[ConsolidationGroup.model_validate(g) for g in run.groups],
        consolidated=run.consolidated, created=run.created, deleted=run.deleted,
        request=request_to_show(run.request),
        composition=composition_to_show(run.composition),
        progress=ConsolidationProgress(groups_done=run.groups_done,
                                       groups_total=run.groups_total),
        candidates=run.candidates, remainder=run.remainder, dry_run=run.dry_run,
        trigger=run.trigger,
        timings=ConsolidationTimings.model_validate(run.timings),
        created_at=run.created_at, started_at=run.started_at, finished_at=run.finished_at,
        reverted_at=run.reverted_at, error=run.error, request_id=run.request_id,
    )


class ConsolidationService:
    def __init__(self, resources: Resources, session: AsyncSession,
                 tenant_id: uuid.UUID) -> None:
        self.resources = resources
        self.session = session
        self.tenant_id = tenant_id
        self.repository = ConsolidationRepository(session, tenant_id)

    async def run(self, request: ConsolidationRequest,
                  on_cut: Callable[[str], None] | None = None
                  ) -> tuple[int, ConsolidationResult]:
        """(200, the finished run), or (202, the queued run) for `async`. `on_cut`: see
        ConsolidationRunner.run_now."""
        composition = compose(request, self.resources)
        if request.run_async:
            return 202, await self._queue(request, composition)
        # The run opens its own short transactions; the request's session stays unused.
        run = await ConsolidationRunner(self.resources, self.tenant_id).run_now(
            request, composition, on_cut=on_cut)
        if run.status == "running":
            # It stopped on a group whose COMMIT went unanswered, and its record could not
            # be settled yet: the group's transaction still held it (runs._fail).
            raise OutcomeUnknown(
                f"the database stopped answering while consolidation run {run.id} wrote a "
                "group, so whether that group was applied is not known yet; the run's "
                "record is settled from the memories table once that connection has ended "
                f"(within a minute of it): read GET /v1/consolidations/{run.id} before "
                "running it again")
        return 200, to_result(run)

    async def _queue(self, request: ConsolidationRequest,
                     composition: Composition) -> ConsolidationResult:
        """Record the run and enqueue its job in this request's transaction."""
        run_id = uuid7()
        key = run_lock_key(self.tenant_id, request, run_id)
        if not await lock_is_free(await self.session.connection(), key):
            raise await ConsolidationRunner(self.resources, self.tenant_id).busy_error(key)
        run = await self.repository.insert_run(
            run_values(request, composition, key, "api", run_id=run_id, pid=None))
        await enqueue(self.session, RUN_JOB,
                      {"tenant_id": str(self.tenant_id), "run_id": str(run.id)})
        return to_result(run)

    async def get(self, run_id: uuid.UUID) -> ConsolidationResult:
        return to_result(await self._get(run_id))

    async def _get(self, run_id: uuid.UUID, *, for_update: bool = False) -> ConsolidationRun:
        run = await self.repository.get_run(run_id, for_update=for_update)
        if run is None:
            raise NotFound(f"consolidation run {run_id} does not exist")
        return run

    async def list(self, filters: RunFilter, *, limit: int,
                   cursor: str | None) -> ConsolidationPage:
        of = listing("runs", self.tenant_id, filters)
        after = decode_cursor(cursor, of) if cursor else None
        runs, next_cursor = cut_page(
            await self.repository.page_runs(filters, limit=limit + 1, after=after),
            limit, lambda r: (r.created_at, r.id), of)
        return ConsolidationPage(items=[to_result(r) for r in runs], next_cursor=next_cursor)

    async def revert(self, run_id: uuid.UUID) -> ConsolidationResult:
        """Restore an archive-mode run's sources and delete its summaries, all at once."""
        run = await self._get(run_id, for_update=True)
        refuse_revert(run)
        groups = [ConsolidationGroup.model_validate(g) for g in run.groups]
        summary_ids = [g.summary_id for g in groups if g.summary_id is not None]
        removed = [i for g in groups if g.outcome == "written" for i in g.removed_ids]
        await self.repository.lock_families([*summary_ids, *removed])
        locked = await self.repository.lock_summaries(summary_ids)
        edited = [s.id for s in locked if s.edited]
        if edited:
            raise Conflict(f"summary {edited[0]} of this run has been changed since it was "
                           "written, and a revert deletes its summaries; delete it first "
                           f"(DELETE /v1/memories/{edited[0]}) to revert all the same")
        # A summary of this run that is archived but folded into no later summary was put
        # away by the user's memory cap (or the summary folding it was deleted): it goes
        # with the rest, as its sources come back.
        later = await self.repository.summary_folding(summary_ids) if summary_ids else None
        if later is not None:
            # Reverting that run is not always possible (a synthesize_only one): deleting
            # the later summary always is.
            raise Conflict(f"summary {later.summary_id} of this run has since been folded "
                           f"into summary {later.by_summary} by run {later.by_run}; revert "
                           f"that run first, or delete that summary (DELETE /v1/memories/"
                           f"{later.by_summary}) to revert this one all the same")
        over = (await self.repository.folded_over(removed, run_id, run.created_at)
                if removed else None)
        if over is not None:
            raise Conflict(f"summary {over.summary_id} of memories this run archived has "
                           f"since been folded into summary {over.by_summary} by run "
                           f"{over.by_run}; revert that run first, or delete that summary "
                           f"(DELETE /v1/memories/{over.by_summary}) to revert this one "
                           "all the same")
        again = (await self.repository.summarised_again(removed, run_id, run.created_at)
                 if removed else None)
        if again is not None:
            raise Conflict(f"summary {again.summary_id}, which this run folded, would come "
                           f"back beside summary {again.by_summary} of run {again.by_run}, "
                           "which has since summarised some of the same memories; revert "
                           "that run first, or delete that summary (DELETE /v1/memories/"
                           f"{again.by_summary}) to revert this one all the same")
        await self.repository.delete_summaries(summary_ids, run_id)
        await self.repository.restore(removed, run_id, run.created_at)
        values: dict[str, Any] = {"reverted_at": func.now()}
        await self.repository.update_run(run_id, values)
        return to_result(await self._get(run_id))


def refuse_revert(run: ConsolidationRun) -> None:
    if run.dry_run:
        raise Conflict("this run was a dry run: it changed nothing, there is nothing to revert")
    if run.status == "running":
        raise Conflict("this run is still running; revert it once it has finished")
    if run.mode == "synthesize_only":
        raise Conflict("this run was synthesize_only: it archived nothing, so there is "
                       "nothing to restore; delete its summaries instead if they are unwanted")
    if run.reverted_at is not None:
        raise Conflict(f"this run was already reverted at {run.reverted_at.isoformat()}")
