"""SQL for memories. Every statement is confined to the repository's tenant."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, NamedTuple, cast

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    CursorResult,
    Result,
    Row,
    Select,
    Table,
    Text,
    and_,
    any_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    text,
    true,
    tuple_,
    update,
)
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.dialects.postgresql import UUID as PG_UUID
from sqlalchemy.dialects.postgresql import array
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import aliased

from app.db import Fetcher, delete_in_batches, jsonb
from app.errors import LOCK_NOT_AVAILABLE, sqlstate
from app.idempotency.repository import erase_answers, erase_answers_across, named_memories
from app.memories.summary_labels import Labels
from app.models import SCOPE_COLUMNS, Memory, MemoryVersion
from app.models.vector import vector_text
from app.search.term_stats import USER_KEY

log = logging.getLogger("engram.maintenance")

_TABLE = cast(Table, Memory.__table__)
# The row dicts are keyed by attribute; a Core insert wants column names (`metadata_`
# is the column `metadata`).
_COLUMN = {a.key: a.columns[0].key for a in sa_inspect(Memory).column_attrs}
# From this many rows a batch's vectors are put in their text form off the event loop.
_TEXT_OFF_LOOP_ROWS = 16


# The columns a memory's answer shows (`Memory` in app/memories/schemas.py): what a change
# returns and the reads select, never the embedding or the tsvector (a loaded entity
# parsed both: most of a listing's time).
ANSWER = (
    Memory.id, Memory.content, Memory.user_id, Memory.agent_id, Memory.session_id,
    Memory.namespace, Memory.category, Memory.tags, Memory.importance,
    Memory.metadata_.label("metadata"), Memory.source, Memory.fact_role, Memory.summary_of,
    Memory.created_at, Memory.updated_at, Memory.expires_at, Memory.archived_at,
    Memory.consolidation_id,
)


ANSWER_KEYS = tuple(column.key for column in ANSWER)
"""The answer's field names, in `ANSWER`'s order (`metadata` under its API name)."""
ANSWER_SQL = ", ".join(f"m.{key}" for key in ANSWER_KEYS)
"""`ANSWER` as a select list over `memories m`, for the statements written as text."""


def answer_record(columns: Sequence[Any]) -> dict[str, Any]:
    """A row of `ANSWER_SQL` read on a plain asyncpg connection, as the answer's fields
    (asyncpg hands `jsonb` over as its JSON text)."""
    record = dict(zip(ANSWER_KEYS, columns, strict=True))
    record["metadata"] = jsonb(record["metadata"])
    return record


def _one_or_none(result: Result[Any]) -> dict[str, Any] | None:
    row = result.mappings().one_or_none()
    return None if row is None else dict(row)


def _vector_texts(vectors: Sequence[Any]) -> list[Any]:
    return [vector_text(v) if isinstance(v, list) else v for v in vectors]


@dataclass(frozen=True)
class MemoryFilter:
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    namespace: str | None = None
    tags: Sequence[str] | None = None
    categories: Sequence[str] | None = None
    fact_role: str | None = None
    include_archived: bool = False
    created_after: datetime | None = None
    created_before: datetime | None = None
    metadata: dict[str, Any] | None = None  # jsonb containment; None or {}: any

    def given(self) -> list[str]:
        """The filters set, by name: what a log line may say of an erasure, whose values
        are what was erased."""
        return [f.name for f in fields(self)
                if getattr(self, f.name) not in (None, False, [], (), {})]


DELETE_BATCH = 1000
"""Rows one statement of a filtered delete removes: the statistics triggers fold each
statement's change, so none folds a huge one."""


# The capacity bound (app/memories/capacity.py). The lock is per tenant and user, for the
# transaction; the key hashed from text, apart from the consolidation's scope locks. It is
# its own statement: a statement's snapshot is taken before it waits for a lock, and the
# count must see what the write it waited for committed.
_LOCK_USER = text("SELECT pg_advisory_xact_lock(hashtextextended(:lock, 25))")


# The summary families of some memories (`MemoryRepository.lock_families`), for the
# transaction: a family is an exact scope, and its lock one of FAMILY_SLOTS per tenant
# (the scope hashed), taken in the slots' order (the function runs above the ordered
# subquery), in one round trip. With `{tenant}` and `{ids}` in the placeholders' form of
# the driver that sends it; `_lock_matching_families` takes the same locks for the
# memories a filter matches. Slots, not a lock per scope: a filtered delete of a user with
# 16,000 sessions took 16,000 locks in one transaction, filled PostgreSQL's lock table
# (500 "out of shared memory", nothing deleted) and made other tenants' writes fail while
# it did (an exploratory probe). Two families in one slot only wait for each other.
FAMILY_SLOTS = 128
_SCOPE_SLOT = (f"(hashtextextended(json_build_array(user_id, agent_id, session_id, "
               f"namespace)::text, 26) & {FAMILY_SLOTS - 1})")
FAMILY_LOCKS = f"""
    SELECT pg_advisory_xact_lock(hashtextextended(CAST({{tenant}} AS text) || '/' || f.slot, 26))
      FROM (SELECT DISTINCT {_SCOPE_SLOT} AS slot
              FROM memories
             WHERE tenant_id = {{tenant}} AND id = ANY(CAST({{ids}} AS uuid[]))
             ORDER BY slot) AS f"""
_LOCK_FAMILIES = text(FAMILY_LOCKS.format(tenant=":tenant_id", ids=":ids"))

# One summary level of `follow_expiry`: the summaries built from :source, whose expiry is
# the sooner of their own (a client's) and their sources' first; least() and min() pass
# over nulls, so one with neither never expires. Those it moved, to follow in turn.
_FOLLOW_EXPIRY = text("""
WITH due AS (
    SELECT s.id, s.expires_at AS was,
           least(s.own_expires_at,
                 (SELECT min(m.expires_at) FROM memories AS m
                   WHERE m.tenant_id = s.tenant_id AND m.id = ANY(s.summary_of))) AS now
      FROM memories AS s
     WHERE s.tenant_id = :t AND s.fact_role = 'summary'
       AND s.summary_of && ARRAY[CAST(:source AS uuid)]
       FOR UPDATE OF s)
UPDATE memories AS s SET expires_at = due.now
  FROM due
 WHERE s.tenant_id = :t AND s.id = due.id AND due.now IS DISTINCT FROM due.was
RETURNING s.id""")

# UNION, not UNION ALL: a summary folded by two summaries is read once, and a cycle
# (none is written, but nothing forbids one) ends.
_BUILT_FROM = text("""
WITH RECURSIVE built(id) AS (
    SELECT id FROM memories
     WHERE tenant_id = :t AND fact_role = 'summary'
       AND summary_of && ARRAY[CAST(:m AS uuid)]
    UNION
    SELECT s.id FROM memories AS s JOIN built AS b ON s.summary_of && ARRAY[b.id]
     WHERE s.tenant_id = :t AND s.fact_role = 'summary')
SELECT m.id, m.tags, m.category, m.metadata
  FROM memories AS m JOIN built USING (id)
 WHERE m.tenant_id = :t""")


def _lock_matching_families(tenant_id: uuid.UUID, filters: MemoryFilter) -> Select[Any]:
    """`FAMILY_LOCKS` for the tenant's memories that `filters` match."""
    slots = (select(literal_column(_SCOPE_SLOT).label("slot")).distinct()
             .where(Memory.tenant_id == tenant_id, *_matching(filters))
             .order_by("slot").subquery())
    key = func.hashtextextended(literal(f"{tenant_id}/") + slots.c.slot.cast(Text), 26)
    return select(func.pg_advisory_xact_lock(key)).select_from(slots)


# One statement (one firing of the statistics' update trigger): the user's active rows as
# the triggers count them (a few index entries, this transaction's insert included),
# then as many victims as that is past the cap, expired ones first (through
# ix_memories_tenant_user_expiring: those the purge has not reached), then in
# ix_memories_tenant_user_evict's order. Each chosen once, in a materialized CTE: as `id
# IN (SELECT ... LIMIT n)` the planner ran the subquery again and archived more than `n`.
_EVICT = text("""
WITH past AS MATERIALIZED (
    SELECT greatest(coalesce(sum(df), 0) - :cap, 0) AS n FROM term_stats
    WHERE tenant_id = :t AND lexeme = :key),
expired AS MATERIALIZED (
    SELECT id FROM memories
    WHERE tenant_id = :t AND user_id = :u AND expires_at IS NOT NULL
      AND archived_at IS NULL AND expires_at <= now()
    LIMIT (SELECT n FROM past) FOR UPDATE),
ranked AS MATERIALIZED (
    SELECT id FROM memories
    WHERE tenant_id = :t AND user_id = :u AND archived_at IS NULL
      AND id <> ALL(CAST(:keep AS uuid[])) AND id NOT IN (SELECT id FROM expired)
    ORDER BY importance, created_at, id
    LIMIT (SELECT n - (SELECT count(*) FROM expired) FROM past) FOR UPDATE),
gone AS (
    UPDATE memories m SET archived_at = now()
    FROM (SELECT id FROM expired UNION ALL SELECT id FROM ranked) v
    WHERE m.tenant_id = :t AND m.id = v.id
    RETURNING 1)
SELECT count(*) FROM gone""")


def live(now: Any = None) -> Any:
    """Rows a reader may see at all: not expired."""
    moment = now if now is not None else func.now()
    return or_(Memory.expires_at.is_(None), Memory.expires_at > moment)


class Gone(NamedTuple):
    """A deleted memory, as much of it as releasing it takes (`MemoryRepository.release`):
    a summary's sources and the run that wrote it; a fact's `summary_of` is empty."""

    id: uuid.UUID
    consolidation_id: uuid.UUID | None
    summary_of: list[uuid.UUID]


_GONE = (Memory.id, Memory.consolidation_id, Memory.summary_of)


class MemoryRepository:
    def __init__(self, session: AsyncSession, tenant_id: uuid.UUID) -> None:
        self.session = session
        self.tenant_id = tenant_id

    async def insert_many(self, rows: Sequence[dict[str, Any]]) -> None:
        # One multi-row statement: the statement triggers (the term statistics of migration
        # 0004) then fire once for the batch. Executed with a list of rows and RETURNING,
        # SQLAlchemy renders them into one INSERT per 1,000 ("insertmanyvalues") from a
        # cached compilation; `.values(rows)` compiled a new statement every time, ~150 ms
        # of the event loop for 500 rows, during which no other request moved. Through the
        # table, not the ORM entity: the ORM's bulk insert splits the rows into one
        # statement per set of non-None columns.
        if not rows:
            return
        params = [{_COLUMN.get(k, k): v for k, v in row.items()} | {"tenant_id": self.tenant_id}
                  for row in rows]
        if len(rows) >= _TEXT_OFF_LOOP_ROWS:
            # A vector's text form costs 50-110 us of Python. Made on a thread, which
            # gives the loop the GIL back every few ms, the longest stretch the event loop
            # stood still during a 500-row insert went from 44-90 to 7-23 ms.
            texts = await asyncio.to_thread(_vector_texts, [p.get("embedding") for p in params])
            for p, text in zip(params, texts, strict=True):
                p["embedding"] = text
        await self.session.execute(insert(_TABLE).returning(_TABLE.c.id), params)

    async def update(self, memory_id: uuid.UUID,
                     values: dict[str, Any]) -> tuple[dict[str, Any], int] | None:
        """The changed memory's answer columns (`ANSWER`) and its version number, or None
        when absent or expired.

        `updated_at` and `version` are the memories_history trigger's (migration 0027):
        they move only when a tracked field really changes, and `updated_at` is stamped
        once the row is locked."""
        stmt = (
            update(Memory)
            .where(and_(Memory.tenant_id == self.tenant_id, Memory.id == memory_id), live())
            .values(**values)
            .returning(*ANSWER, Memory.version)
            .execution_options(synchronize_session=False)
        )
        row = _one_or_none(await self.session.execute(stmt))
        return None if row is None else (row, row.pop("version"))

    async def lock_families(self, ids: Sequence[uuid.UUID]) -> None:
        """Hold, until the transaction ends, the summary families of the memories `ids`:
        a fact, the summaries built from it and what they archived share one exact scope
        (consolidation groups never mix scopes), and one lock per scope, taken in order,
        makes two changes of one family wait for each other. Without it, deleting a fact
        (the fact, then its summaries) and its summary (the summary, then its sources) at
        once took their rows in opposite orders and deadlocked."""
        await self.session.execute(_LOCK_FAMILIES, {"tenant_id": self.tenant_id,
                                                    "ids": list(ids)})

    async def delete(self, memory_id: uuid.UUID) -> Gone | None:
        # An expired memory is absent to DELETE as to GET and PATCH: otherwise the answer
        # (204 or 404) would depend on whether the maintenance purge had run yet. Its
        # summaries expired with it (`follow_expiry`, and consolidation's).
        stmt = (
            delete(Memory)
            .where(Memory.tenant_id == self.tenant_id, Memory.id == memory_id, live())
            .returning(*_GONE)
        )
        row = (await self.session.execute(stmt)).first()
        return None if row is None else Gone(*row)

    async def release(self, gone: Sequence[Gone]) -> int:
        """After `gone` were deleted: delete every summary built from one of them, or from
        such a summary in turn (a deleted memory's text must not live on in a summary
        search keeps answering), and bring back what every summary that went had archived,
        those of `gone` among them (the memories a summary stood for are not lost with
        it). How many summaries were deleted here."""
        deleted = {g.id for g in gone}
        return await self._dissolve(list(deleted), [g for g in gone if g.summary_of], deleted)

    async def dissolve_summaries(self, memory_id: uuid.UUID) -> int:
        """Before the memory's text changes: delete every summary built from it, or from
        such a summary in turn (a summary of the old text would go on answering for it),
        and bring back what they had archived, the memory among them. How many went."""
        return await self._dissolve([memory_id], [], set())

    async def dissolve(self, summary_ids: Sequence[uuid.UUID]) -> int:
        """Delete these summaries and every summary built from them in turn, and bring
        back what they had archived. How many went."""
        rows = (await self.session.execute(
            select(*_GONE)
            .where(Memory.tenant_id == self.tenant_id, Memory.fact_role == "summary",
                   among(summary_ids))
            .with_for_update())).all()
        gone = [r.id for r in rows]
        if not gone:
            return 0
        await self.session.execute(delete(Memory).where(
            Memory.tenant_id == self.tenant_id, among(gone)))
        return len(gone) + await self._dissolve(gone, [Gone(*r) for r in rows], set(gone))

    async def _dissolve(self, frontier: list[uuid.UUID], went: list[Gone],
                        deleted: set[uuid.UUID]) -> int:
        before = len(deleted)
        while frontier:
            rows = (await self.session.execute(
                select(*_GONE)
                .where(Memory.tenant_id == self.tenant_id, Memory.fact_role == "summary",
                       Memory.summary_of.op("&&")(uuid_array(frontier)))
                .with_for_update())).all()
            if not rows:
                break
            frontier = [r.id for r in rows]
            await self.session.execute(delete(Memory).where(
                Memory.tenant_id == self.tenant_id, among(frontier)))
            deleted.update(frontier)
            went.extend(Gone(*r) for r in rows)
        for summary in went:
            sources = [i for i in summary.summary_of if i not in deleted]
            if sources:
                await self.session.execute(
                    unarchive(self.tenant_id, sources, summary.consolidation_id))
        return len(deleted) - before

    async def labels_of(self, memory_id: uuid.UUID) -> Labels | None:
        """The memory's tags, category and metadata (None when absent or expired)."""
        row = (await self.session.execute(
            select(Memory.tags, Memory.category, Memory.metadata_)
            .where(Memory.tenant_id == self.tenant_id, Memory.id == memory_id,
                   live()))).first()
        return None if row is None else Labels(tuple(row.tags), row.category, row.metadata_)

    async def labels_of_summaries_built_from(
            self, memory_id: uuid.UUID) -> list[tuple[uuid.UUID, Labels]]:
        """Every summary built from the memory, or from such a summary in turn, with its
        labels."""
        rows = (await self.session.execute(_BUILT_FROM, {"t": self.tenant_id,
                                                         "m": memory_id})).all()
        return [(r.id, Labels(tuple(r.tags), r.category, r.metadata)) for r in rows]

    async def content_for_update(self, memory_id: uuid.UUID) -> tuple[str, bool] | None:
        """The memory's text, its row locked, and whether a summary was built from it;
        None when absent or expired."""
        summary = aliased(Memory)
        built_from = (select(summary.id)
                      .where(summary.tenant_id == Memory.tenant_id,
                             summary.fact_role == "summary",
                             summary.summary_of.op("@>")(array([Memory.id])))
                      .exists())
        row = (await self.session.execute(
            select(Memory.content, built_from)
            .where(Memory.tenant_id == self.tenant_id, Memory.id == memory_id, live())
            .with_for_update(of=Memory))).first()
        return None if row is None else (row[0], bool(row[1]))

    async def sources_first_expiry(self, memory_id: uuid.UUID) -> datetime | None:
        """When the first of a summary's sources expires (None for a fact, or when none
        expires)."""
        source = aliased(Memory)
        return cast(datetime | None, await self.session.scalar(
            select(func.min(source.expires_at))
            .select_from(Memory)
            .join(source, and_(source.tenant_id == Memory.tenant_id,
                               source.id == any_(Memory.summary_of)))
            .where(Memory.tenant_id == self.tenant_id, Memory.id == memory_id,
                   Memory.fact_role == "summary")))

    async def follow_expiry(self, memory_id: uuid.UUID) -> None:
        """After the memory's expiry changed: every summary built from it, or from such a
        summary in turn, expires with the first of its sources (it holds their text,
        which must not outlive them), or sooner where a client set it so. A source's
        expiry put off or cleared puts such a summary off too, back to the client's
        expiry at the latest: until 2026-12-01 the client's was not kept, and a summary
        set to expire in 30 minutes, brought forward by a source set to 10, never expired
        once the source's expiry was cleared (a re-probe)."""
        changed = [memory_id]
        while changed:
            moved: list[uuid.UUID] = []
            for source in changed:
                moved += [r.id for r in (await self.session.execute(
                    _FOLLOW_EXPIRY, {"t": self.tenant_id, "source": source})).all()]
            changed = moved

    async def delete_versions(self, memory_id: uuid.UUID) -> int | None:
        """Erase the memory's earlier states; how many, or None when the memory is absent
        or expired. The memory's row is locked first, as a change locks it, so a change
        under way is either erased with the rest or comes after."""
        found = await self.session.execute(
            select(Memory.id)
            .where(Memory.tenant_id == self.tenant_id, Memory.id == memory_id, live())
            .with_for_update(key_share=True))
        if found.first() is None:
            return None
        erased = await self.session.execute(delete(MemoryVersion).where(
            MemoryVersion.tenant_id == self.tenant_id, MemoryVersion.memory_id == memory_id))
        return int(cast(CursorResult[Any], erased).rowcount or 0)

    async def evict_past_cap(self, user_id: str, cap: int, keep: Sequence[uuid.UUID]) -> int:
        """Archive as many of the user's active memories as it holds past `cap`, expired
        ones first (those in `keep` too: a write that was expired when it arrived took a
        live memory's place), then by (importance, created_at, id), never those in
        `keep`; how many.
        Holds the user's lock until the transaction ends, so the next write of the user
        counts after this one's change."""
        await self.session.execute(_LOCK_USER, {"lock": f"{self.tenant_id}/{user_id}"})
        return int((await self.session.execute(_EVICT, {
            "t": self.tenant_id, "u": user_id, "keep": list(keep), "cap": cap,
            "key": USER_KEY + user_id})).scalar_one())

    async def forget_write_counts(self, scope: dict[str, str]) -> None:
        """Delete automatic consolidation's write counts (app/consolidation/auto.py) of every
        scope within `scope` (scope columns and values): an erasure of the scope leaves no
        row naming it. A count's key is its scope's four columns as a JSON array."""
        preds = " AND ".join(f"(scope_key::jsonb ->> {SCOPE_COLUMNS.index(column)}) = :{column}"
                             for column in scope)
        await self.session.execute(text(
            f"DELETE FROM scope_write_counters WHERE tenant_id = :tenant_id AND {preds}"),
            {"tenant_id": self.tenant_id, **scope})

    async def delete_matching(self, filters: MemoryFilter,
                              batch: int = DELETE_BATCH) -> list[Gone]:
        """Delete every memory matching `filters`, expired ones too. In statements of
        `batch` rows, all in the caller's transaction, until one deletes none (rows a
        concurrent delete took would end it early on a short one). The families of the
        memories matched are held first, as a single delete holds its memory's: the
        statements lock rows in the order they find them, and a delete of one of the
        summaries (the summary, then what it archived) took them in another and
        deadlocked."""
        await self.session.execute(_lock_matching_families(self.tenant_id, filters))
        chosen = (select(Memory.id).where(Memory.tenant_id == self.tenant_id,
                                          *_matching(filters))
                  .limit(batch).scalar_subquery())
        stmt = (delete(Memory).where(Memory.id.in_(chosen)).returning(*_GONE)
                .execution_options(synchronize_session=False))
        deleted: list[Gone] = []
        while rows := (await self.session.execute(stmt)).all():
            deleted.extend(Gone(*r) for r in rows)
        return deleted


def _matching(filters: MemoryFilter) -> list[Any]:
    preds: list[Any] = [getattr(Memory, column) == getattr(filters, column)
                        for column in SCOPE_COLUMNS if getattr(filters, column) is not None]
    if filters.tags:
        preds.append(Memory.tags.contains(list(filters.tags)))
    if filters.categories:
        preds.append(Memory.category.in_(list(filters.categories)))
    if filters.fact_role is not None:
        preds.append(Memory.fact_role == filters.fact_role)
    if filters.created_after is not None:
        preds.append(Memory.created_at > filters.created_after)
    if filters.created_before is not None:
        preds.append(Memory.created_at < filters.created_before)
    if filters.metadata:
        preds.append(Memory.metadata_.contains(filters.metadata))
    if not filters.include_archived:
        preds.append(Memory.archived_at.is_(None))
    return preds


LIVE_SQL = "(m.expires_at IS NULL OR m.expires_at > now())"

_VERSION_COLUMNS = ("version", "content", "category", "tags", "importance", "metadata",
                    "expires_at", "valid_from", "replaced_at")
"""`live()` for the statements written as text over `memories m`."""


class MemoryReader:
    """The reads of the memory endpoints: one statement each on their own asyncpg pool
    (a `Fetcher`; app/search/reader.py, `memory_read_settings`), outside any transaction,
    as the search's. Through a request session a read of one memory paid the pool's
    pre-ping, BEGIN and COMMIT around its statement, and a listing the ORM's handling of
    every row (bench/reads.py: 2.4-4.4 -> 0.7-1.1 ms by id, 79-85 -> 14-19 ms for 500).
    Confined to the tenant; expired rows are never read."""

    def __init__(self, db: Fetcher, tenant_id: uuid.UUID) -> None:
        self.db = db
        self.tenant_id = tenant_id

    async def get(self, memory_id: uuid.UUID) -> dict[str, Any] | None:
        """The memory's answer fields, or None when absent or expired."""
        rows = await self.db.fetch(
            f"SELECT {ANSWER_SQL} FROM memories m "
            f"WHERE m.tenant_id = $1 AND m.id = $2 AND {LIVE_SQL}",
            self.tenant_id, memory_id)
        return answer_record(rows[0]) if rows else None

    async def versions(self, memory_id: uuid.UUID, *, limit: int,
                       before: int | None = None) -> list[dict[str, Any]] | None:
        """Up to `limit` earlier states of the memory, newest first, older than version
        `before` when given; None when the memory is absent or expired. One statement:
        the memory's row, joined to its versions (a row of nulls when it has none)."""
        rows = await self.db.fetch(
            f"SELECT {', '.join('v.' + c for c in _VERSION_COLUMNS)} FROM memories m "
            "LEFT JOIN LATERAL (SELECT * FROM memory_versions v "
            "  WHERE v.tenant_id = m.tenant_id AND v.memory_id = m.id "
            "    AND ($3::int IS NULL OR v.version < $3) "
            "  ORDER BY v.version DESC LIMIT $4) v ON true "
            f"WHERE m.tenant_id = $1 AND m.id = $2 AND {LIVE_SQL}",
            self.tenant_id, memory_id, before, limit)
        if not rows:
            return None
        found = [dict(zip(_VERSION_COLUMNS, row, strict=True)) for row in rows
                 if row[0] is not None]
        for record in found:
            record["metadata"] = jsonb(record["metadata"])
        return found

    async def page(
        self,
        filters: MemoryFilter,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None = None,
    ) -> list[dict[str, Any]]:
        """Up to `limit` memories' answer fields, newest first (created_at, then id),
        after the cursor position `after` when given."""
        args: list[Any] = [self.tenant_id]

        def arg(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        where = ["m.tenant_id = $1", LIVE_SQL]
        for column in SCOPE_COLUMNS:
            value = getattr(filters, column)
            if value is not None:
                where.append(f"m.{column} = {arg(value)}")
        if filters.tags:
            where.append(f"m.tags @> {arg(list(filters.tags))}::text[]")
        if filters.categories:
            where.append(f"m.category = ANY({arg(list(filters.categories))}::text[])")
        if filters.fact_role is not None:
            where.append(f"m.fact_role = {arg(filters.fact_role)}")
        if filters.created_after is not None:
            where.append(f"m.created_at > {arg(filters.created_after)}")
        if filters.created_before is not None:
            where.append(f"m.created_at < {arg(filters.created_before)}")
        if filters.metadata:
            where.append(f"m.metadata @> {arg(json.dumps(filters.metadata))}::jsonb")
        if not filters.include_archived:
            where.append("m.archived_at IS NULL")
        if after is not None:
            where.append(f"(m.created_at, m.id) < ({arg(after[0])}, {arg(after[1])})")
        rows = await self.db.fetch(
            f"SELECT {ANSWER_SQL} FROM memories m WHERE {' AND '.join(where)} "
            f"ORDER BY m.created_at DESC, m.id DESC LIMIT {arg(limit)}", *args)
        return [answer_record(row) for row in rows]


async def purge_tenant(engine: AsyncEngine, tenant_id: uuid.UUID, batch: int = 1000) -> int:
    """Delete every memory of a tenant, `batch` rows a transaction (the statistics
    triggers fold each one's change); how many. Rows written meanwhile are left to the
    tenant row's cascade."""
    chosen = select(Memory.id).where(Memory.tenant_id == tenant_id).limit(batch)
    return await delete_in_batches(engine, delete(Memory).where(
        Memory.tenant_id == tenant_id, Memory.id.in_(chosen.scalar_subquery())), batch)


async def purge_versions_replaced_before(engine: AsyncEngine, cutoff: datetime,
                                         batch: int = 1000) -> int:
    """Delete the earlier states of memories, across tenants, that were replaced before
    `cutoff` (a maintenance job); how many. `batch` rows a transaction, oldest first,
    through ix_memory_versions_replaced_at; rows a change has locked are left for the
    next round."""
    key = tuple_(MemoryVersion.tenant_id, MemoryVersion.memory_id, MemoryVersion.version)
    old = (
        select(MemoryVersion.tenant_id, MemoryVersion.memory_id, MemoryVersion.version)
        .where(MemoryVersion.replaced_at < cutoff)
        .order_by(MemoryVersion.replaced_at)
        .limit(batch)
        .with_for_update(skip_locked=True)
    )
    return await delete_in_batches(
        engine, delete(MemoryVersion).where(key.in_(old)).returning(
            MemoryVersion.tenant_id, MemoryVersion.memory_id, MemoryVersion.version), batch,
        then=_erase_first_states)


async def _erase_first_states(conn: AsyncConnection,
                              gone: Sequence[Row[*tuple[Any, ...]]]) -> None:
    """A keyed create's stored answer quotes the memory's first state: once the history
    let that go, the answer was the last place it stood."""
    await erase_answers_across(
        conn, ((tenant_id, memory_id) for tenant_id, memory_id, version in gone
               if version == 1), named_memories)


async def purge_expired(engine: AsyncEngine, batch: int = 1000) -> int:
    """Delete the memories past their expiry, across tenants (a maintenance job, not a
    request); how many, with the summaries that went with them. No reader can see them
    any more (`live`), but they still sat in the HNSW and full-text indexes, which a
    search then read past, and in BM25's term statistics. Each tenant's are released as
    a delete's are (`MemoryRepository.release`): a summary of an expired memory goes
    too, and what an expired summary had archived comes back. `batch` rows a
    transaction, so no round holds many locks or makes the statistics triggers fold a
    huge change at once; rows a request has locked are skipped and left for the next
    round, so neither waits for the other."""
    expired = (
        select(Memory.id)
        .where(Memory.expires_at <= func.now())
        .order_by(Memory.expires_at)
        .limit(batch)
        .with_for_update(skip_locked=True)
    )
    stmt = (delete(Memory).where(Memory.id.in_(expired.scalar_subquery()))
            .returning(Memory.tenant_id, *_GONE))
    total = 0
    while True:
        try:
            async with AsyncSession(engine) as session, session.begin():
                # The release locks summaries after the expired rows: a request that
                # holds a summary and waits for one of those rows (a revert) would
                # deadlock with it. The purge gives way, before the deadlock detector
                # (1 s) could pick the request, and the next round takes the batch again.
                await session.execute(text("SET LOCAL lock_timeout = '200ms'"))
                rows = (await session.execute(stmt)).all()
                by_tenant: dict[uuid.UUID, list[Gone]] = {}
                for row in rows:
                    by_tenant.setdefault(row.tenant_id, []).append(Gone(*row[1:]))
                dissolved = 0
                for tenant_id, went in by_tenant.items():
                    dissolved += await MemoryRepository(session, tenant_id).release(went)
                    # A keyed create's stored answer quotes the memory: an expiry is the
                    # caller's own erasure, which the answer outlived by the key's hours.
                    await erase_answers(session, tenant_id, named_memories(g.id for g in went))
        except DBAPIError as exc:
            if sqlstate(exc) != LOCK_NOT_AVAILABLE:
                raise
            log.info("expired memory purge: a summary to release is locked; the rest of "
                     "this round waits for the next")
            return total
        total += len(rows) + dissolved
        if len(rows) < batch:
            return total


def uuid_array(ids: Sequence[uuid.UUID]) -> Any:
    """One uuid[] parameter, so one prepared statement for any number of ids."""
    return bindparam(None, list(ids), type_=ARRAY(PG_UUID(as_uuid=True)))


def among(ids: Sequence[uuid.UUID]) -> ColumnElement[bool]:
    """`id = ANY($1)`."""
    return Memory.id == any_(uuid_array(ids))


def unarchive(tenant_id: uuid.UUID, ids: Sequence[uuid.UUID], run_id: uuid.UUID | None,
              since: datetime | None = None) -> Any:
    """Bring back those of `ids` the run `run_id` archived, as a revert of it does: the
    facts it archived (they carry its id) and any prior summary it folded (which keeps
    the id of the run that wrote it, so which run archived it is not recorded) unless an
    active summary folds it now: a later run archived it again, and bringing it back
    would serve it beside the summary standing for it. With `since` (the run's start),
    only a summary written after it is such a later one: one written before stood beside
    the prior summary before the run too (an automatic summary of it). Call it after the
    summaries that go are deleted."""
    folder = aliased(Memory)
    folded_now = (select(folder.id)
                  .where(folder.tenant_id == tenant_id, folder.fact_role == "summary",
                         folder.archived_at.is_(None),
                         # ix_memories_summary_of (GIN) serves @>, not = ANY.
                         folder.summary_of.op("@>")(array([Memory.id])),
                         true() if since is None else folder.created_at > since)
                  .exists())
    return (update(Memory)
            .where(Memory.tenant_id == tenant_id, among(ids), Memory.archived_at.is_not(None),
                   ((Memory.fact_role == "summary") & ~folded_now)
                   | (Memory.consolidation_id == run_id))
            .values(archived_at=None,
                    consolidation_id=case((Memory.fact_role == "fact", None),
                                          else_=Memory.consolidation_id))
            .execution_options(synchronize_session=False))

