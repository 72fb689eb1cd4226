"""SQL for consolidation: candidates, the per-group write, revert, and run records.

Every statement is confined to the repository's tenant; the crash sweep's two, which look
at every tenant's running runs, and the runs' retention purge are the module-level
functions.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np
from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    delete,
    exists,
    func,
    insert,
    or_,
    select,
    text,
    tuple_,
    update,
)
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.dialects.postgresql import array
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import aliased

from app.consolidation.schemas import ConsolidationRequest
from app.consolidation.types import Entry, Partitioning, Scope
from app.db import delete_in_batches
from app.memories.repository import FAMILY_LOCKS, MemoryRepository, among, live, unarchive
from app.models import ConsolidationRun, Memory, MemoryVersion, ScopeWriteCounter
from app.worker.queue import job_pending


def content_digest(content: str) -> str:
    """What PostgreSQL's md5(content) answers for the same text (UTF-8 database)."""
    return hashlib.md5(content.encode(), usedforsecurity=False).hexdigest()


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a listing shows: by status, by trigger, and by the scope their request
    named (each given field equal; a run whose request named no user is not a user's)."""

    status: str | None = None
    trigger: str | None = None
    scope: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A candidate as it was when selected; a group is written only if it still is."""

    updated_at: datetime
    digest: str


@dataclass(frozen=True, slots=True)
class Candidates:
    entries: list[Entry]
    snapshots: dict[uuid.UUID, Snapshot]
    remainder: int


@dataclass(frozen=True, slots=True)
class SummaryState:
    """A run's summary as a revert finds it: changed through PATCH since (a summary is
    written with updated_at = created_at), or not."""

    id: uuid.UUID
    edited: bool


@dataclass(frozen=True, slots=True)
class Refolded:
    """A later summary built from one of a run's summaries."""

    summary_id: uuid.UUID  # the run's summary, folded again
    by_summary: uuid.UUID
    by_run: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class SourceState:
    id: uuid.UUID
    updated_at: datetime
    digest: str
    active: bool


class ConsolidationRepository:
    def __init__(self, session: AsyncSession, tenant_id: uuid.UUID) -> None:
        self.session = session
        self.tenant_id = tenant_id

    # Candidates -------------------------------------------------------------------

    def candidate_predicates(self, request: ConsolidationRequest) -> list[ColumnElement[bool]]:
        """Every criterion of the request, as predicates of one query."""
        preds: list[ColumnElement[bool]] = [
            Memory.tenant_id == self.tenant_id, Memory.archived_at.is_(None), live(),
        ]
        for column, value in ((Memory.user_id, request.user_id),
                              (Memory.agent_id, request.agent_id),
                              (Memory.session_id, request.session_id),
                              (Memory.namespace, request.namespace)):
            if value is not None:
                preds.append(column == value)
        if request.tags:
            preds.append(Memory.tags.contains(list(request.tags)))
        if request.categories:
            preds.append(Memory.category.in_(list(request.categories)))
        if request.metadata:
            preds.append(Memory.metadata_.contains(request.metadata))
        if request.older_than_seconds is not None:
            preds.append(
                Memory.created_at < func.now() - timedelta(seconds=request.older_than_seconds)
            )
        if request.created_after is not None:
            preds.append(Memory.created_at > request.created_after)
        if request.created_before is not None:
            preds.append(Memory.created_at < request.created_before)
        if request.max_importance is not None:
            preds.append(Memory.importance <= request.max_importance)
        if not request.include_summaries:
            preds.append(Memory.fact_role == "fact")
        if request.mode == "synthesize_only":
            # Sources stay active in this mode, so without this every run would
            # summarise the same memories again.
            preds.append(~self._covered_by_live_summary())
        return preds

    def _covered_by_live_summary(self) -> Any:
        summary = aliased(Memory)
        return exists().where(
            summary.tenant_id == Memory.tenant_id,
            summary.fact_role == "summary",
            summary.archived_at.is_(None),
            # An expired summary the purge has not yet removed stands for nothing a
            # reader can see.
            or_(summary.expires_at.is_(None), summary.expires_at > func.now()),
            summary.summary_of.op("@>")(array([Memory.id])),
        )

    async def candidates(
        self, request: ConsolidationRequest, *, limit: int, with_embeddings: bool,
        partitioning: Partitioning,
    ) -> Candidates:
        """The oldest `limit` matches that could fold (`partitioning`), in a deterministic
        order, and how many more there are."""
        columns: list[Any] = [Memory.id, Memory.content, Memory.category, Memory.importance,
                              Memory.created_at, Memory.updated_at, Memory.tags,
                              Memory.fact_role, Memory.metadata_, Memory.user_id,
                              Memory.agent_id, Memory.session_id, Memory.namespace,
                              Memory.expires_at, Memory.summary_of]
        if with_embeddings:
            # In halfvec's binary form (4 bytes of header, then 16-bit floats: a fifth of
            # the text's size), read into floats by `_entries`: through the column's type
            # every float of 10,000 vectors was parsed from text on the event loop, which
            # stalled every request 1.2-1.8 s (an exploratory probe).
            columns.append(func.halfvec_send(Memory.embedding).label("embedding"))
        keys: list[Any] = [Memory.user_id, Memory.agent_id, Memory.session_id,
                           Memory.namespace]
        if partitioning.by_category:
            keys.append(Memory.category)
        # Only the ids and partition sizes of every match; the rows of the window after.
        sized = (select(Memory.id, Memory.created_at,
                        func.count().over(partition_by=keys).label("size"))
                 .where(*self.candidate_predicates(request)).subquery())
        foldable = sized.c.size >= partitioning.min_size
        window = (select(sized.c.id).where(foldable)
                  .order_by(sized.c.created_at, sized.c.id).limit(limit))
        stmt = (select(*columns).where(Memory.tenant_id == self.tenant_id,
                                       Memory.id.in_(window))
                .order_by(Memory.created_at, Memory.id))
        rows = (await self.session.execute(stmt)).all()
        # On a worker thread: 10,000 entries (a digest of each content, and the vectors)
        # held the event loop 0.4 s, and 1.2-1.8 s with the vectors parsed from text.
        entries, snapshots = await asyncio.to_thread(_entries, rows, with_embeddings)
        entries = await self._with_all_they_stand_for(entries)
        remainder = 0
        if len(rows) == limit:
            total = await self.session.scalar(
                select(func.count()).select_from(sized).where(foldable))
            remainder = max(0, int(total or 0) - limit)
        return Candidates(entries, snapshots, remainder)

    async def _with_all_they_stand_for(self, entries: list[Entry]) -> list[Entry]:
        """`entries`, each summary's `summary_of` grown to everything under it, through
        summaries of summaries (read a level at a time): S, of an archived S3 of E, stands
        for E too, and a group keeping E beside S's fold kept E's text twice (a re-probe)."""
        under: dict[uuid.UUID, tuple[uuid.UUID, ...]] = {e.id: e.summary_of for e in entries}
        wanted = {i for ids in under.values() for i in ids} - under.keys()
        while wanted:
            rows = (await self.session.execute(
                select(Memory.id, Memory.summary_of)
                .where(Memory.tenant_id == self.tenant_id, Memory.id.in_(wanted)))).all()
            for row in rows:
                under[row.id] = tuple(row.summary_of)
            for missing in wanted - {row.id for row in rows}:
                under[missing] = ()
            wanted = {i for row in rows for i in row.summary_of} - under.keys()

        def everything_under(summary: uuid.UUID) -> tuple[uuid.UUID, ...]:
            seen: dict[uuid.UUID, None] = {}
            stack = list(under[summary])
            while stack:
                item = stack.pop()
                if item not in seen and item != summary:
                    seen[item] = None
                    stack.extend(under.get(item, ()))
            return tuple(seen)

        return [replace(e, summary_of=everything_under(e.id)) if e.summary_of else e
                for e in entries]

    # The per-group write ----------------------------------------------------------

    # Revert -------------------------------------------------------------------------

    async def lock_families(self, ids: Sequence[uuid.UUID]) -> None:
        """The summary families of `ids`, held as a delete holds them
        (MemoryRepository.lock_families), before any of their rows is locked."""
        await MemoryRepository(self.session, self.tenant_id).lock_families(ids)

    async def lock_summaries(self, ids: Sequence[uuid.UUID]) -> list[SummaryState]:
        """The run's surviving summaries, locked. One is edited if it changed since it was
        written, its expiry aside: the service moves that itself (a source's expiry caps
        its summaries'), and a revert deletes summaries anyway. Without its earlier
        states to tell (history off or erased), any change counts."""
        states = select(MemoryVersion).where(MemoryVersion.tenant_id == Memory.tenant_id,
                                             MemoryVersion.memory_id == Memory.id)
        written = or_(*(getattr(MemoryVersion, c).is_distinct_from(getattr(Memory, c))
                        for c in ("content", "category", "tags", "importance", "metadata_")))
        edited = ((Memory.updated_at > Memory.created_at)
                  & (~states.exists() | states.where(written).exists()))
        stmt = (select(Memory.id, edited.label("edited"))
                .where(Memory.tenant_id == self.tenant_id, among(ids),
                       Memory.fact_role == "summary")
                .order_by(Memory.id).with_for_update(of=Memory))
        return [SummaryState(r.id, bool(r.edited))
                for r in (await self.session.execute(stmt)).all()]

    async def summary_folding(self, ids: Sequence[uuid.UUID]) -> Refolded | None:
        """A later summary built from one of `ids`, if any."""
        stmt = (select(Memory.id, Memory.consolidation_id, Memory.summary_of)
                .where(Memory.tenant_id == self.tenant_id, Memory.fact_role == "summary",
                       Memory.summary_of.op("&&")(array(list(ids))),
                       Memory.id.not_in(list(ids)))
                .limit(1))
        row = (await self.session.execute(stmt)).first()
        if row is None:
            return None
        folded = next(i for i in ids if i in set(row.summary_of))
        return Refolded(folded, row.id, row.consolidation_id)

    async def folded_over(self, ids: Sequence[uuid.UUID], run_id: uuid.UUID,
                          since: datetime) -> Refolded | None:
        """An archived summary of some of `ids` (memories run `run_id` archived) that
        another run's active summary, written after `since` (the run), folds: an archive
        run folds a summary whose sources are all archived
        (GroupWriter.superseded_summaries), and bringing `ids` back would leave that
        summary standing, through the one folding it, for active memories. One written
        before the run stood so before it too, and a revert brings that state back (a
        re-probe: a chain of three automatic summaries refused its revert)."""
        folder = aliased(Memory)
        stmt = (select(Memory.id, folder.id, folder.consolidation_id)
                .join(folder, and_(folder.tenant_id == Memory.tenant_id,
                                   folder.fact_role == "summary",
                                   folder.archived_at.is_(None),
                                   folder.summary_of.op("@>")(array([Memory.id]))))
                .where(Memory.tenant_id == self.tenant_id, Memory.fact_role == "summary",
                       Memory.archived_at.is_not(None),
                       Memory.summary_of.op("&&")(array(list(ids))),
                       folder.consolidation_id.is_distinct_from(run_id),
                       folder.created_at > since)
                .limit(1))
        row = (await self.session.execute(stmt)).first()
        return None if row is None else Refolded(row[0], row[1], row[2])

    async def summarised_again(self, ids: Sequence[uuid.UUID], run_id: uuid.UUID,
                               since: datetime) -> Refolded | None:
        """An archived summary among `ids` (what run `run_id` folded) some of whose
        sources a live summary written after `since` (the run) stands for: brought back,
        two live summaries would answer for the same memories, where before the run one
        did. (One written before the run stood beside it then, and may again.)"""
        live = aliased(Memory)
        stmt = (select(Memory.id, live.id, live.consolidation_id)
                .join(live, and_(live.tenant_id == Memory.tenant_id,
                                 live.fact_role == "summary", live.archived_at.is_(None),
                                 live.id != Memory.id,
                                 live.summary_of.op("&&")(Memory.summary_of)))
                .where(Memory.tenant_id == self.tenant_id, among(ids),
                       Memory.fact_role == "summary", Memory.archived_at.is_not(None),
                       live.consolidation_id.is_distinct_from(run_id),
                       live.created_at > since,
                       live.expires_at.is_(None) | (live.expires_at > func.now()))
                .limit(1))
        row = (await self.session.execute(stmt)).first()
        return None if row is None else Refolded(row[0], row[1], row[2])

    async def delete_summaries(self, ids: Sequence[uuid.UUID], run_id: uuid.UUID) -> int:
        stmt = delete(Memory).where(Memory.tenant_id == self.tenant_id,
                                    among(ids), Memory.fact_role == "summary",
                                    Memory.consolidation_id == run_id)
        return (await self.session.execute(stmt)).rowcount  # type: ignore[attr-defined, no-any-return]

    async def restore(self, ids: Sequence[uuid.UUID], run_id: uuid.UUID,
                      since: datetime) -> int:
        """Bring back what the run (begun at `since`) archived (memories.unarchive)."""
        stmt = unarchive(self.tenant_id, ids, run_id, since)
        return (await self.session.execute(stmt)).rowcount  # type: ignore[attr-defined, no-any-return]

    async def summaries_of_run(self, run_id: uuid.UUID) -> list[tuple[uuid.UUID, str, list[Any]]]:
        """(id, category, summary_of) of every summary a run wrote: the truth after a crash."""
        stmt = (select(Memory.id, Memory.category, Memory.summary_of)
                .where(Memory.tenant_id == self.tenant_id, Memory.fact_role == "summary",
                       Memory.consolidation_id == run_id)
                .order_by(Memory.id))
        return [(r.id, r.category, list(r.summary_of))
                for r in (await self.session.execute(stmt)).all()]

    # Run records --------------------------------------------------------------------

    async def insert_run(self, values: dict[str, Any]) -> ConsolidationRun:
        stmt = (insert(ConsolidationRun).values(tenant_id=self.tenant_id, **values)
                .returning(ConsolidationRun))
        return (await self.session.scalars(stmt)).one()

    async def get_run(self, run_id: uuid.UUID, *, for_update: bool = False
                      ) -> ConsolidationRun | None:
        stmt = select(ConsolidationRun).where(ConsolidationRun.tenant_id == self.tenant_id,
                                              ConsolidationRun.id == run_id)
        if for_update:
            stmt = stmt.with_for_update()
        # A run read again in one session must show what the database holds now.
        stmt = stmt.execution_options(populate_existing=True)
        return (await self.session.scalars(stmt)).one_or_none()

    async def page_runs(self, filters: RunFilter, *, limit: int,
                        after: tuple[datetime, uuid.UUID] | None) -> list[ConsolidationRun]:
        """Newest first, through ix_consolidation_runs_tenant_created; a filter is checked
        on each run read (runs are few beside memories: a rare status reads past the
        others)."""
        stmt = select(ConsolidationRun).where(ConsolidationRun.tenant_id == self.tenant_id)
        if filters.status is not None:
            stmt = stmt.where(ConsolidationRun.status == filters.status)
        if filters.trigger is not None:
            stmt = stmt.where(ConsolidationRun.trigger == filters.trigger)
        for field, value in (filters.scope or {}).items():
            stmt = stmt.where(ConsolidationRun.request[field].astext == value)
        if after is not None:
            stmt = stmt.where(
                tuple_(ConsolidationRun.created_at, ConsolidationRun.id) < tuple_(*after))
        stmt = stmt.order_by(ConsolidationRun.created_at.desc(),
                             ConsolidationRun.id.desc()).limit(limit)
        return list((await self.session.scalars(stmt)).all())

    async def update_run(self, run_id: uuid.UUID, values: dict[str, Any],
                         *, only_if_status: str | None = None) -> bool:
        stmt = update(ConsolidationRun).where(ConsolidationRun.tenant_id == self.tenant_id,
                                              ConsolidationRun.id == run_id)
        if only_if_status is not None:
            stmt = stmt.where(ConsolidationRun.status == only_if_status)
        stmt = stmt.values(**values).execution_options(synchronize_session=False)
        return bool((await self.session.execute(stmt)).rowcount)  # type: ignore[attr-defined]

    async def finish_run(self, run_id: uuid.UUID, values: dict[str, Any]
                         ) -> ConsolidationRun | None:
        """The run as finished; None if it is gone (its tenant was deleted meanwhile)."""
        stmt = (update(ConsolidationRun)
                .where(ConsolidationRun.tenant_id == self.tenant_id,
                       ConsolidationRun.id == run_id)
                .values(**values).returning(ConsolidationRun)
                .execution_options(synchronize_session=False, populate_existing=True))
        return (await self.session.scalars(stmt)).one_or_none()


_MEMORIES = cast(Table, Memory.__table__)
_RUNS = cast(Table, ConsolidationRun.__table__)
_UUID = PG_UUID(as_uuid=True)
_M = _MEMORIES.c
_R = _RUNS.c

class GroupWriter:
    """The statements a run repeats once per group, sent on the run connection's driver
    (asyncpg) directly, inside the transaction the caller opened: thousands of times per
    run, SQLAlchemy's per-statement work cost the service about three times what the
    statements themselves did (bench/consolidate.py). Confined to the tenant as the
    repository is."""

    def __init__(self, connection: Any, tenant_id: uuid.UUID) -> None:
        self.connection = connection
        self.tenant_id = tenant_id

    async def lock_sources(self, ids: Sequence[uuid.UUID]) -> list[SourceState]:
        """Lock the rows (in id order, so two writers never deadlock) and read their state.
        Their family first, as a delete takes it: a filtered delete locks a user's rows in
        the order it finds them, and with a group holding some of them they deadlocked."""
        await self.connection.execute(LOCK_FAMILIES, self.tenant_id, list(ids))
        rows = await self.connection.fetch(LOCK_SOURCES, self.tenant_id, list(ids))
        return [SourceState(r["id"], r["updated_at"], r["digest"], r["active"]) for r in rows]

    async def covering_summary(self, ids: Sequence[uuid.UUID]) -> uuid.UUID | None:
        """A live summary that covers one of `ids`, if any. Run after `lock_sources`, in a
        statement of its own, so that it sees a summary committed while the lock waited."""
        found: uuid.UUID | None = await self.connection.fetchval(
            COVERING_SUMMARY, self.tenant_id, list(ids))
        return found

    async def superseded_summaries(self, ids: Sequence[uuid.UUID],
                                   kept: uuid.UUID | None = None, *, lock: bool = True
                                   ) -> list[uuid.UUID]:
        """The live summaries, locked, that an archive of `ids` leaves standing for nothing
        active: each source of theirs is one of `ids` or a fact a run has archived (a
        summary of that run stands for it). A synthesize_only summary (an automatic run's)
        of memories an archive run then folds is one: left live, it would be served beside
        the archive's summary of the same memories. A summary that still stands for an
        active memory, or for one the memory cap archived, stays, and so does the one the
        group keeps (`kept`: the selector chose it to stay). A summary of such a summary
        (an automatic run's with include_summaries) is one in turn, so the search goes up
        a level at a time until a level finds none; each level is locked after the one it
        stands on, as a delete of a source locks the summaries above it. Without `lock`,
        for a dry run's preview."""
        statement = SUPERSEDED_SUMMARIES if lock else SUPERSEDED_SUMMARIES_UNLOCKED
        superseded: list[uuid.UUID] = []
        while level := list(await self.connection.fetchval(
                statement, self.tenant_id, [*ids, *superseded], kept)):
            superseded += level
        return superseded

    async def insert_summary(self, values: Mapping[str, Any], *, folding: bool = False
                             ) -> None:
        """`values` by column name; the embedding as a list of floats. `folding`: it
        folds superseded summaries too (their own expiry may come first)."""
        await self.connection.execute(
            INSERT_FOLDING_SUMMARY if folding else INSERT_SUMMARY, self.tenant_id,
            *(values[c] for c in SUMMARY_COLUMNS[:-2]),
            json.dumps(values["metadata"]), _halfvec_text(values["embedding"]))

    async def archive(self, ids: Sequence[uuid.UUID], run_id: uuid.UUID) -> int:
        """Move sources out of the active set. A fact records the run that folded it; a
        prior summary keeps `consolidation_id` = the run that wrote it (its lineage)."""
        status = await self.connection.execute(ARCHIVE, self.tenant_id, list(ids), run_id)
        return int(status.rsplit(" ", 1)[1])

    async def add_progress(self, run_id: uuid.UUID, *, consolidated: int = 0,
                           created: int = 0, deleted: int = 0) -> None:
        await self.connection.execute(ADD_PROGRESS, self.tenant_id, run_id, consolidated,
                                      created, deleted)


def _halfvec_text(vector: Sequence[float]) -> str:
    return "[" + ",".join(map(str, map(float, vector))) + "]"


SUMMARY_COLUMNS = ("id", "content", "user_id", "agent_id", "session_id", "namespace",
                   "category", "tags", "importance", "source", "fact_role", "summary_of",
                   "consolidation_id", "expires_at", "metadata", "embedding")
COVERING_SUMMARY = """
    SELECT id FROM memories
     WHERE tenant_id = $1 AND fact_role = 'summary' AND archived_at IS NULL
       AND (expires_at IS NULL OR expires_at > now())
       AND summary_of && $2::uuid[]
     LIMIT 1"""
# Locked in id order, after the sources (lock_sources): a delete or an expiry PATCH of a
# source locks the source before its summaries, so the two never wait in a circle.
SUPERSEDED_SUMMARIES = """
    WITH superseded AS (
        SELECT s.id FROM memories AS s
         WHERE s.tenant_id = $1 AND s.fact_role = 'summary' AND s.archived_at IS NULL
           AND (s.expires_at IS NULL OR s.expires_at > now())
           AND s.summary_of && $2::uuid[] AND s.id <> ALL($2::uuid[])
           AND s.id IS DISTINCT FROM $3::uuid
           AND NOT EXISTS (
               SELECT 1 FROM memories AS src
                WHERE src.tenant_id = $1 AND src.id = ANY(s.summary_of)
                  AND src.id <> ALL($2::uuid[])
                  AND NOT (src.archived_at IS NOT NULL AND src.fact_role = 'fact'
                           AND src.consolidation_id IS NOT NULL))
         ORDER BY s.id
           FOR UPDATE OF s)
    SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM superseded"""
SUPERSEDED_SUMMARIES_UNLOCKED = SUPERSEDED_SUMMARIES.replace("FOR UPDATE OF s", "")
LOCK_FAMILIES = FAMILY_LOCKS.format(tenant="$1", ids="$2")
LOCK_SOURCES = """
    SELECT id, updated_at, md5(content) AS digest,
           archived_at IS NULL AND (expires_at IS NULL OR expires_at > now()) AS active
      FROM memories
     WHERE tenant_id = $1 AND id = ANY($2::uuid[])
     ORDER BY id
       FOR UPDATE"""
_SUMMARY_OF = f"${SUMMARY_COLUMNS.index('summary_of') + 2}::uuid[]"
# A summary's days are its sources' (a fact's UTC day, a summary's covered days), read in
# the transaction that has just locked them (migration 0010).
INSERT_SUMMARY = f"""
    INSERT INTO memories (tenant_id, {", ".join(SUMMARY_COLUMNS)}, covered_days)
    VALUES ($1, {", ".join(f"${i}" for i in range(2, len(SUMMARY_COLUMNS)))},
            ${len(SUMMARY_COLUMNS)}::jsonb, ${len(SUMMARY_COLUMNS) + 1}::text::halfvec,
            (SELECT coalesce(array_agg(DISTINCT d.day ORDER BY d.day), '{{}}')
               FROM memories s CROSS JOIN LATERAL unnest(
                    CASE WHEN cardinality(s.covered_days) > 0 THEN s.covered_days
                         ELSE ARRAY[(s.created_at AT TIME ZONE 'UTC')::date] END) AS d(day)
              WHERE s.tenant_id = $1 AND s.id = ANY({_SUMMARY_OF})))"""
# A summary that folds superseded summaries expires with the first of its sources or of
# theirs (given), or with one of them when sooner (a PATCH may have set it): it holds
# their text too, and one that outlived them is what a PATCH of its expiry refuses.
# least() passes over nulls. Only then: on every insert the lookup cost a run 4-11%
# (bench/consolidate.py --scopes 300).
_EXPIRES_AT = f"${SUMMARY_COLUMNS.index('expires_at') + 2}"
INSERT_FOLDING_SUMMARY = INSERT_SUMMARY.replace(
    f"{_EXPIRES_AT},", f"least({_EXPIRES_AT}::timestamptz, (SELECT min(s.expires_at) "
    f"FROM memories s WHERE s.tenant_id = $1 AND s.id = ANY({_SUMMARY_OF}))),", 1)
ARCHIVE = """
    UPDATE memories
       SET archived_at = now(),
           consolidation_id = CASE WHEN fact_role = 'fact' THEN $3 ELSE consolidation_id END
     WHERE tenant_id = $1 AND id = ANY($2::uuid[]) AND archived_at IS NULL"""
ADD_PROGRESS = """
    UPDATE consolidation_runs
       SET groups_done = groups_done + 1, consolidated = consolidated + $3,
           created = created + $4, deleted = deleted + $5
     WHERE tenant_id = $1 AND id = $2"""


# A started run `r` whose lock its holder still holds: it is being run now.
RUN_LOCK_HELD = """
       r.lock_pid IS NOT NULL
       AND EXISTS (
           SELECT 1 FROM pg_locks AS l
            WHERE l.locktype = 'advisory' AND l.granted
              AND l.database = (SELECT oid FROM pg_database
                                 WHERE datname = current_database())
              AND l.pid = r.lock_pid
              AND l.classid = ((r.lock_key >> 32) & 4294967295)::oid
              AND l.objid = (r.lock_key & 4294967295)::oid
              AND l.objsubid = 1)"""

ABANDONED_RUNS = text(f"""
    UPDATE consolidation_runs AS r
       SET status = 'failed', finished_at = now(), error = :error
     WHERE r.status = 'running'
       AND r.lock_pid IS NOT NULL
       AND NOT ({RUN_LOCK_HELD})
    RETURNING r.tenant_id, r.id, r.trigger
""")


async def fail_abandoned(session: AsyncSession,
                         error: str) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
    """Mark failed every started run whose lock holder no longer holds its lock; their
    tenant, id and trigger."""
    rows = (await session.execute(ABANDONED_RUNS, {"error": error})).all()
    return [(r.tenant_id, r.id, r.trigger) for r in rows]


# One statement, so one snapshot: a worker claims a run (started_at) before its job ends,
# so a queued run seen with no job left was never claimed and never will be.
NEVER_STARTED_RUNS = text(f"""
    UPDATE consolidation_runs AS r
       SET status = 'failed', finished_at = now(), error = :error
     WHERE r.status = 'running'
       AND r.lock_pid IS NULL AND r.started_at IS NULL
       AND NOT {job_pending("r.id::text")}
    RETURNING r.tenant_id, r.id, r.trigger
""")


async def fail_never_started(session: AsyncSession, error: str,
                             job: str) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
    """Mark failed every queued run whose job (entry point `job`, payload `run_id`) has
    left the queue without starting it: it failed on every try, or was deleted. Their
    tenant, id and trigger."""
    rows = (await session.execute(NEVER_STARTED_RUNS, {
        "error": error, "job_entrypoint": job, "job_payload_key": "run_id"})).all()
    return [(r.tenant_id, r.id, r.trigger) for r in rows]


def _entries(rows: Sequence[Any], with_embeddings: bool
             ) -> tuple[list[Entry], dict[uuid.UUID, Snapshot]]:
    """The candidates' entries and snapshots; their embeddings read from halfvec's binary
    form (big-endian 16-bit floats after a 4-byte header)."""
    entries: list[Entry] = []
    snapshots: dict[uuid.UUID, Snapshot] = {}
    for row in rows:
        embedding = (tuple(np.frombuffer(row.embedding, dtype=">f2", offset=4).tolist())
                     if with_embeddings and row.embedding is not None else None)
        entries.append(Entry(id=row.id, content=row.content, category=row.category,
                             importance=row.importance, created_at=row.created_at,
                             embedding=embedding, tags=tuple(row.tags),
                             fact_role=row.fact_role, metadata=row.metadata_,
                             scope=Scope(row.user_id, row.agent_id, row.session_id,
                                         row.namespace),
                             expires_at=row.expires_at,
                             summary_of=tuple(row.summary_of)))
        snapshots[row.id] = Snapshot(row.updated_at, content_digest(row.content))
    return entries, snapshots


# One window of the runs that ended before :cutoff, past the last one a round saw (in the
# order of ix_consolidation_runs_finished), and of it those no memory names: a run whose
# summaries and archived facts are all gone (deleted, reverted, dissolved) or that never
# wrote any (a dry run, a run with nothing to fold, a failed one). A run a memory names is
# kept: it is the summary's lineage and what a revert restores from; and a run that has
# ended never comes to be named again, so one found unnamed stays so.
PURGE_RUNS = text("""
WITH seen AS (
    SELECT r.tenant_id, r.id, r.finished_at FROM consolidation_runs AS r
     WHERE r.finished_at IS NOT NULL AND r.finished_at < :cutoff
       AND (r.finished_at, r.tenant_id, r.id)
           > (CAST(:after_at AS timestamptz), CAST(:after_tenant AS uuid),
              CAST(:after_id AS uuid))
     ORDER BY r.finished_at, r.tenant_id, r.id
     LIMIT :batch
), gone AS (
    DELETE FROM consolidation_runs AS r USING seen AS s
     WHERE r.tenant_id = s.tenant_id AND r.id = s.id
       AND NOT EXISTS (SELECT 1 FROM memories AS m
                        WHERE m.tenant_id = s.tenant_id AND m.consolidation_id = s.id)
    RETURNING r.id
)
SELECT (SELECT count(*) FROM seen) AS seen, (SELECT count(*) FROM gone) AS removed,
       l.finished_at, l.tenant_id, l.id
  FROM (SELECT 1) AS one
  LEFT JOIN LATERAL (SELECT * FROM seen ORDER BY finished_at DESC, tenant_id DESC, id DESC
                      LIMIT 1) AS l ON true
""")
_FIRST_KEY = (datetime(1, 1, 1, tzinfo=UTC), uuid.UUID(int=0), uuid.UUID(int=0))


async def purge_runs_finished_before(engine: AsyncEngine, cutoff: datetime,
                                     batch: int = 500) -> int:
    """Delete the runs that ended before `cutoff` and that no memory names any more (a
    maintenance job: ENGRAM_CONSOLIDATION_RUN_RETENTION_DAYS); how many. `batch` runs are
    looked at a transaction, walking on past the ones kept, so the runs whose summaries
    stand are read once a round, not once a batch."""
    removed = 0
    after_at, after_tenant, after_id = _FIRST_KEY
    while True:
        async with engine.begin() as conn:
            row = (await conn.execute(PURGE_RUNS, {
                "cutoff": cutoff, "batch": batch, "after_at": after_at,
                "after_tenant": after_tenant, "after_id": after_id})).one()
        removed += int(row.removed)
        if row.seen < batch:
            return removed
        after_at, after_tenant, after_id = row.finished_at, row.tenant_id, row.id


async def purge_idle_write_counts(engine: AsyncEngine, cutoff: datetime,
                                  batch: int = 1000) -> int:
    """Delete automatic consolidation's write counts of scopes not written since `cutoff`
    (a maintenance job); how many. A count was kept for every scope ever written, a
    conversation's session id or a user long erased by expiry among them: one row, its
    ids in plain text, for ever (a day-2 probe). A scope written again counts from 0."""
    idle = (select(ScopeWriteCounter.tenant_id, ScopeWriteCounter.scope_key)
            .where(ScopeWriteCounter.updated_at < cutoff)
            .limit(batch).with_for_update(skip_locked=True))
    return await delete_in_batches(engine, delete(ScopeWriteCounter).where(
        tuple_(ScopeWriteCounter.tenant_id, ScopeWriteCounter.scope_key).in_(idle)), batch)
