"""The composite: run the selector, then the op on every group, and collect outcomes.

Groups run concurrently (an LLM op spends its time waiting) under a semaphore; the
outcomes come back in plan order whatever order they finished in. Nothing here
touches the database: the service writes each outcome in its own transaction.
"""

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from app.consolidation.ops.base import Op, OpError
from app.consolidation.selectors.base import Selector, kept_apart_from_its_sources
from app.consolidation.types import Entry, Group, OpContext, OpResult, Scope
from app.providers.llm import LLMError

log = logging.getLogger("engram.consolidation")

OnOutcome = Callable[[int, "GroupOutcome"], Awaitable[None]]
"""Called with (index in the plan, outcome) as each group's op finishes."""


@dataclass(frozen=True, slots=True)
class GroupOutcome:
    """A group and what its op made of it: a result, or the error that left it alone."""

    group: Group
    result: OpResult | None = None
    error: str | None = None
    error_detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None


class Composite:
    def __init__(self, selector: Selector, op: Op, *, max_concurrency: int = 4) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self.selector = selector
        self.op = op
        self.max_concurrency = max_concurrency

    @property
    def requires_llm(self) -> bool:
        return self.op.requires_llm

    def plan(self, entries: Sequence[Entry]) -> list[Group]:
        """The selector's groups, scope by scope: a dry run is this and nothing more.

        The selector sees one scope's entries at a time (see `Scope`), whatever the run
        was asked for: a run over a category or a tag spans every user holding it, and a
        run over a user spans that user's sessions and namespaces. Groups come scope by
        scope (no scope first), each scope's in the selector's order.

        Synchronous and CPU-bound (similarity clustering is a matrix product); for a
        large scan run it in a thread (`asyncio.to_thread`).
        """
        by_scope: dict[Scope, list[Entry]] = defaultdict(list)
        for entry in entries:
            by_scope[entry.scope].append(entry)
        return [replace(kept_apart_from_its_sources(group), scope=scope)
                for scope in sorted(by_scope, key=_scope_order)
                for group in self.selector.select(by_scope[scope])]

    async def summarize(
        self,
        groups: Sequence[Group],
        context: OpContext,
        on_outcome: OnOutcome | None = None,
    ) -> list[GroupOutcome]:
        """The op on every group, at most `max_concurrency` at once, in plan order.

        An op that fails with `OpError` or `LLMError` leaves its group alone and the
        others go on; any other exception is a bug and cancels the run. `on_outcome`
        runs outside the concurrency bound, so a slow write does not hold an LLM slot.
        """
        gate = asyncio.Semaphore(self.max_concurrency)

        async def one(index: int, group: Group) -> GroupOutcome:
            async with gate:
                outcome = await self._consolidate(group, context)
            if on_outcome is not None:
                await on_outcome(index, outcome)
            return outcome

        async with asyncio.TaskGroup() as tasks:
            pending = [tasks.create_task(one(i, g)) for i, g in enumerate(groups)]
        return [task.result() for task in pending]

    async def run(
        self, entries: Sequence[Entry], context: OpContext, on_outcome: OnOutcome | None = None
    ) -> list[GroupOutcome]:
        return await self.summarize(self.plan(entries), context, on_outcome)

    async def _consolidate(self, group: Group, context: OpContext) -> GroupOutcome:
        try:
            result = await self.op.consolidate(group.to_remove, group.category, context)
        except (OpError, LLMError) as exc:
            log.warning("consolidation op failed on category %r: %s", group.category, exc)
            return GroupOutcome(group=group, error=exc.code, error_detail=exc.detail)
        problem = _check(group, result, context)
        if problem is not None:
            log.error("consolidation op returned an invalid result: %s", problem)
            return GroupOutcome(group=group, error="op_invalid_result", error_detail=problem)
        return GroupOutcome(group=group, result=held_through_summaries(result, group))


def held_through_summaries(result: OpResult, group: Group) -> OpResult:
    """`result`, representing too each member that a summary it represents stands for
    (`Entry.summary_of`, through summaries of summaries): that member's text is in the new
    summary through the summary's. An op's cap left one for the next run while taking the
    short summary holding it, and the member stayed live beside the new summary (a
    re-probe: an extractive summary of C, D and a long E, folded with C and D, E left)."""
    represented = set(result.represented_ids)
    members = {e.id: e for e in group.to_remove}
    held = {i for r in represented if r in members for i in members[r].summary_of}
    extra = tuple(e.id for e in group.to_remove if e.id in held and e.id not in represented)
    return replace(result, represented_ids=(*result.represented_ids, *extra)) if extra else result


def _scope_order(scope: Scope) -> tuple[tuple[bool, str], ...]:
    return tuple((value is not None, value or "") for value in scope)


def _check(group: Group, result: OpResult, context: OpContext) -> str | None:
    """Why `result` must not be executed, if it must not.

    The executor removes `represented_ids`, so an op may never name an entry outside
    `to_remove` (the kept entry least of all); a violation leaves the group alone.
    """
    allowed = {e.id for e in group.to_remove}
    represented = result.represented_ids
    if not represented:
        return "the op represented no entry"
    if len(set(represented)) != len(represented):
        return "the op represented an entry twice"
    if not set(represented) <= allowed:
        return "the op represented an entry outside the group's to_remove"
    if not result.summary.strip():
        return "the op produced an empty summary"
    if len(result.summary) > context.max_summary_chars:
        return f"the summary is longer than {context.max_summary_chars} characters"
    return None
