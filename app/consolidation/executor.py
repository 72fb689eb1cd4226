"""The executor: applies one group's op outcome in one transaction, write before delete.

Per group: embed the summary (before any transaction), then in one transaction lock the
sources, check they are still exactly as selected, insert the summary, and only then
archive the sources it represents (archive mode), counting the run's progress in the
same transaction. Any failure rolls the whole group back: its sources stay as they were
and no summary remains. Summary writes go straight to the repository, never through the
memory write path, so they trigger nothing (no eviction, no automatic consolidation).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from app.consolidation.composite import GroupOutcome
from app.consolidation.repository import GroupWriter, Snapshot, SourceState
from app.consolidation.schemas import (
    ConsolidationGroup,
    ConsolidationGroupScope,
    ConsolidationRequest,
)
from app.consolidation.txn import RunTransactions
from app.consolidation.types import Entry, Group, OpResult
from app.errors import answer_lost
from app.ids import uuid7
from app.memories.summary_labels import same_json
from app.resources import Resources
from app.validation import RESERVED_METADATA_KEYS

log = logging.getLogger("engram.consolidation")


class StaleSources(Exception):
    """A source changed, vanished or left the active set since it was selected."""


def planned_group(group: Group, mode: str, outcome: str) -> ConsolidationGroup:
    """A group as the plan has it: who is kept, who would be folded."""
    ids = [e.id for e in group.to_remove]
    return ConsolidationGroup(
        category=group.category,
        scope=ConsolidationGroupScope.model_validate(group.scope._asdict()),
        kept_id=group.kept.id if group.kept else None,
        summary_id=None, removed_ids=ids if mode == "archive" else [], folded_ids=ids,
        mode=None, outcome=outcome,
    )


def previewed_group(outcome: GroupOutcome, mode: str) -> ConsolidationGroup:
    """A dry run's group once its op has run (one that needs no LLM, so it is what the
    run would do): the entries the summary would hold, not every one the plan named
    (an op's length limit leaves some for the next run), or that it would be skipped and
    why (until 2026-12-04 such a group read `planned`, as one the run would write)."""
    if outcome.result is None:
        return planned_group(outcome.group, mode, "skipped").model_copy(update={
            "removed_ids": [], "folded_ids": [], "error": outcome.error,
            "detail": outcome.error_detail})
    record = planned_group(outcome.group, mode, "planned")
    represented = list(outcome.result.represented_ids)
    return record.model_copy(update={
        "removed_ids": represented if mode == "archive" else [], "folded_ids": represented,
        "mode": outcome.result.mode, "detail": outcome.result.detail})


def common_tags(entries: Sequence[Entry]) -> list[str]:
    """Tags every folded entry carries (the run's own tag filter among them), in order."""
    if not entries:
        return []
    shared = set(entries[0].tags).intersection(*(e.tags for e in entries[1:]))
    return [t for t in entries[0].tags if t in shared]


def first_expiry(entries: Sequence[Entry]) -> datetime | None:
    """When a summary of `entries` expires: with the first of them to expire. It holds
    each one's text, which must not outlive it: a summary that lived as long as its
    longest-lived source (or for ever, beside one that never expires) served a secret
    stored for ten seconds in search for good. The others are not lost with it: the purge
    of an expired summary brings back what it archived (`MemoryRepository.release`)."""
    ends = [e.expires_at for e in entries if e.expires_at is not None]
    return min(ends) if ends else None


def common_metadata(entries: Sequence[Entry]) -> dict[str, Any]:
    """The metadata every folded entry holds, key and value alike (the run's own metadata
    filter among them), so a search filtered by it finds the summary of what it folded.
    Not the keys reserved for consolidation output."""
    if not entries:
        return {}
    first, rest = entries[0].metadata, entries[1:]
    return {key: value for key, value in first.items()
            if key not in RESERVED_METADATA_KEYS
            and all(key in e.metadata and same_json(e.metadata[key], value) for e in rest)}


class GroupExecutor:
    def __init__(
        self,
        resources: Resources,
        transactions: RunTransactions,
        tenant_id: uuid.UUID,
        run_id: uuid.UUID,
        request: ConsolidationRequest,
        snapshots: Mapping[uuid.UUID, Snapshot],
    ) -> None:
        self.resources = resources
        self.transactions = transactions
        self.tenant_id = tenant_id
        self.run_id = run_id
        self.request = request
        self.snapshots = snapshots
        self.write_seconds = 0.0
        # One group transaction at a time: they all count progress on the run's row,
        # and PostgreSQL on two cores gains nothing from more.
        self._gate = asyncio.Lock()

    async def apply(self, outcome: GroupOutcome) -> ConsolidationGroup:
        group = outcome.group
        if outcome.result is None:
            await self._count_done()
            return self._unwritten(group, "skipped", outcome.error, outcome.error_detail)
        result = outcome.result
        try:
            (vector,) = await self.resources.embedder.embed([result.summary])
        except Exception as exc:
            log.warning("embedding a summary failed: %s", exc)
            await self._count_done()
            return self._unwritten(group, "failed", "embedding_failed", str(exc)[:500], result)
        async with self._gate:
            started = time.perf_counter()
            unwritten: ConsolidationGroup | None = None
            try:
                summary_id, represented = await self._write(group, result, vector)
            except StaleSources as exc:
                unwritten = self._unwritten(group, "skipped", "sources_changed", str(exc),
                                            result)
            except (asyncpg.PostgresError, OSError) as exc:
                if answer_lost(exc):
                    # No answer came (the client gave up waiting, or the connection broke):
                    # the group may be committed, or be committed yet by a backend that
                    # still holds it. The run ends here; its record is rebuilt from the
                    # memories table under the run row's lock, which that transaction
                    # holds until it ends (runs._fail), or by the crash sweep once its
                    # backend is gone.
                    log.warning("consolidation group write went unanswered; the run stops "
                                "and its record will say what was applied: %r", exc)
                    raise
                log.warning("consolidation group write failed, left as it was: %s", exc)
                detail = str(exc)[:500]
                unwritten = self._unwritten(group, "failed", "write_failed", detail, result)
            finally:
                self.write_seconds += time.perf_counter() - started
            if unwritten is not None:
                await self._count_done_locked()
                return unwritten
        return planned_group(group, self.request.mode, "written").model_copy(update={
            "summary_id": summary_id,
            "removed_ids": represented if self.request.mode == "archive" else [],
            "folded_ids": represented, "mode": result.mode, "detail": result.detail,
        })

    async def _write(self, group: Group, result: OpResult, vector: list[float]
                     ) -> tuple[uuid.UUID, list[uuid.UUID]]:
        """The summary's id, and what it stands for: the sources the op represented and,
        in archive mode, the summaries their archive supersedes."""
        folded = list(result.represented_ids)
        async with self.transactions.driver() as connection:
            repo = GroupWriter(connection, self.tenant_id)
            self._check_unchanged(folded, await repo.lock_sources(folded))
            represented = folded
            if self.request.mode == "archive":
                # Folded with the sources, as a prior summary a run is asked to fold is:
                # archived, kept in the new summary's summary_of, so a revert of this run
                # or a delete of its summary brings them back with the sources.
                kept = group.kept.id if group.kept else None
                represented = [*folded, *await repo.superseded_summaries(folded, kept)]
            elif self.request.mode == "synthesize_only":
                # Selected as covered by no live summary; a run over an overlapping scope
                # (a user's run beside a tag's, an automatic run beside an operator's) may
                # have summarised them since, and sources this mode leaves active would be
                # summarised twice.
                covering = await repo.covering_summary(represented)
                if covering is not None:
                    raise StaleSources(f"summary {covering} of another run has covered "
                                       "these memories since they were selected")
            summary_id = uuid7()
            await repo.insert_summary(
                self._summary_row(summary_id, group, result, represented, vector),
                folding=len(represented) > len(folded))
            deleted = 0
            if self.request.mode == "archive":
                deleted = await repo.archive(represented, self.run_id)
                if deleted != len(represented):
                    raise StaleSources("a source left the active set while being archived")
            # A superseded summary is folded as a prior summary a run is asked to fold is,
            # and counts as one.
            await repo.add_progress(self.run_id, consolidated=len(represented), created=1,
                                    deleted=deleted)
        return summary_id, represented

    def _check_unchanged(self, ids: Sequence[uuid.UUID], states: Sequence[SourceState]) -> None:
        found = {s.id: s for s in states}
        for memory_id in ids:
            state = found.get(memory_id)
            if state is None:
                raise StaleSources(f"memory {memory_id} was deleted")
            snapshot = self.snapshots[memory_id]
            if not state.active:
                raise StaleSources(f"memory {memory_id} was archived or expired")
            if state.updated_at != snapshot.updated_at or state.digest != snapshot.digest:
                raise StaleSources(f"memory {memory_id} changed since it was selected")

    def _summary_row(self, summary_id: uuid.UUID, group: Group, result: OpResult,
                     represented: Sequence[uuid.UUID], vector: list[float]) -> dict[str, Any]:
        # Tags, metadata and expiry from the sources the op read; a superseded summary's
        # text is theirs, and its own expiry is read as the row goes in (insert_summary).
        by_id = {e.id: e for e in group.to_remove}
        folded = [by_id[i] for i in result.represented_ids]
        return {
            "id": summary_id, "content": result.summary, **group.scope._asdict(),
            "category": group.category, "tags": common_tags(folded),
            "importance": self.resources.settings.consolidation_summary_importance,
            "metadata": common_metadata(folded), "expires_at": first_expiry(folded),
            "source": "summary", "fact_role": "summary",
            "summary_of": list(represented), "consolidation_id": self.run_id,
            "embedding": vector,
        }

    def _unwritten(self, group: Group, outcome: str, error: str | None, detail: str | None,
                   result: OpResult | None = None) -> ConsolidationGroup:
        record = planned_group(group, self.request.mode, outcome)
        return record.model_copy(update={
            "removed_ids": [], "folded_ids": [], "error": error, "detail": detail,
            "mode": result.mode if result else None,
        })

    async def _count_done(self) -> None:
        async with self._gate:
            await self._count_done_locked()

    async def _count_done_locked(self) -> None:
        async with self.transactions.driver(transaction=False) as connection:
            await GroupWriter(connection, self.tenant_id).add_progress(self.run_id)
