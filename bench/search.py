"""Search speed benchmark: POST /v1/search through the real HTTP server at 10k and 100k rows.

What is measured: the service retrieves the candidates of both lists in TWO SQL
statements (app/search/repository.py), each one round trip on the search's own asyncpg
pool (app/search/reader.py: connections that start with plan_cache_mode=
force_generic_plan and no parallel workers; no transaction, no set_config, no request
session or commit):
  text    `SearchRepository.text_matches`: the small-scope probe and BM25 over the
          `term_stats` statistics; it needs no vector, so the service starts it BEFORE
          embedding the query and it runs while the query is embedded;
  vector  `SearchRepository.candidates`, after the embedding: exact ranking for a small
          scope or HNSW otherwise (gated on the text statement's `small`, passed as a
          parameter), and the rows of both lists.
Then the pure pipeline runs. A search therefore costs about
max(embedding, text SQL) + vector SQL + the rest (pipeline, HTTP, validation, JSON).

What it does, for each size in --rows (default 10000,100000; about 8-12 minutes in all
on 2 shared cores):

1. Seeds `memories` of a throwaway embedded PostgreSQL (one server for the whole run,
   deleted at the end; migrated to head; `memories` and `term_stats` are emptied together
   between sizes) with N rows for the default tenant, loaded the way bench/ingest.py does
   it: the secondary indexes of `memories` (HNSW, GIN, btrees) are read from pg_indexes and
   dropped, the rows are COPYed in binary, the indexes are recreated from the saved
   definitions (HNSW last, checked identical to the migration's afterwards), then VACUUM
   ANALYZE and pg_prewarm. `tsv` is not written by the COPY: the row-level BEFORE INSERT
   trigger of migration 0003 fills it (row triggers fire on COPY; the column is NOT NULL
   and the benchmark also checks that every row got a tsv with the date lexemes). The
   statement-level triggers of migration 0004 write `term_stats` delta rows on every COPY;
   the benchmark checks them against the table (corpus row and every lexeme's df) and
   then folds them into one row per lexeme, as the background fold keeps them.

   Users are skewed: a few large users (5-10k rows each at 100k; 2 users of 1,500 at 10k,
   so the large-user query runs the HNSW path, not the exact one), a few mid-sized ones
   (200-900) and many small ones (50-100 rows). created_at is spread over a year, 2% of
   rows carry an expiry (half already expired), 1% are summaries.

   Text: 10-30-word sentences from bench/ingest.py's template generator (names, foods,
   places, projects, events... over a shared vocabulary, so common words are common and a
   query of common words matches thousands of rows, as in a real store).

   Embeddings (the choice, documented): --base-sentences generated sentences (4,000 at full
   size) are embedded once with the real MiniLM model (cached in the git-ignored
   bench/results/). That many rows -- 4% of 100k, 40% of 10k -- store exactly that sentence
   and its real vector. Every other row's vector is a cheap one: normalise(e_a + w*e_b +
   sigma*z) with e_a, e_b real embeddings from its user's topic set (which holds the user's
   real rows), w ~ U(0, 0.5), sigma ~ U(0.015, 0.035), z ~ N(0, I); its text is a fresh
   sentence of the generator, not paired with the vector. That keeps MiniLM's anisotropy
   and cluster structure (what decides how much work HNSW does) and each user's vectors
   clustered on its own topics; uniform random vectors would make the graph behave
   differently. Text/vector pairing does not change the cost of either half.

2. Runs the service (`python -m app serve`, ENGRAM_EMBEDDER=local, auth off, no query cache
   unless --query-cache: every request embeds its query, as for a question asked for the
   first time) against that database and, in --rounds interleaved rounds (so a change of
   load on the shared machine hits every figure alike), measures sequentially:
     HTTP  POST /v1/search latency for unscoped-tenant queries, for queries scoped to a
           small user (a different 50-100-row user each time) and to the largest user,
           each request sent twice, interleaved: through httpx, and through LeanHttp (a
           keep-alive socket with no client library: httpx's own ~1.5-2 ms per request
           is in every latency it measures, and is not the service's time);
     E     the floor: one query embedding alone, in this process, by the encoder the
           service runs (app/providers/sentence_encoder.py: ONNX Runtime by default, one
           thread), called directly (no batcher, no thread hand-off); and, as the
           reference the earlier runs and measurements.md used, the same query through
           sentence-transformers on torch (one thread). The goal check is against the
           service's own encoder; the ratio to the reference floor is printed beside it;
     H     the floor: one HNSW top-10 query alone (asyncpg, same database, ef_search as the
           service's setting), plus the same for the large user with iterative scan;
     SQL   the app's two candidate statements alone, per class, each timed: text_matches
           then candidates of app.search.repository.SearchRepository, one after the other,
           on an app.search.reader.SearchReader opened on the app's engine (the pool type
           and connection settings the service uses; no embedding).
   A what-if times text + vector with text_match_cap 200 and with exact_below 250 (timing
   only; both change which rows are found, so recall).
   With --query-cache N the service keeps N query vectors, and the measured questions are
   then asked again (lean client): a search whose vector comes from the cache.
   Then requests/s with 8 concurrent clients (httpx.AsyncClient, a bounded number of mixed
   requests), and the plans the service really runs for a sample of queries of each class:
   on a dedicated asyncpg connection with the search pool's settings, auto_explain
   (log_analyze, JSON; loaded and set for that session) captures the plan each of the two
   statements ran -- the generic plan (a plain EXPLAIN with bound parameters would always
   plan with their values, i.e. a custom plan) -- and the report says which kind it was.
   From them: which vector branch of the `vec` CTE ran (the exact ranking over the scope's
   btree, or HNSW: the branch whose Result, gated on the `small` parameter, produced rows,
   and whether the HNSW index returned rows), which text match branch ran, the own time of
   each CTE (without the CTEs it reads), each statement's executor time, and how many rows
   were matched.

3. Prints the tables (seed, floors, latency and its split, throughput, plans, goal check:
   p50 within 1.5x of embedding + HNSW floor, p95 under 50 ms at 100k) and writes JSON to
   bench/results/ (git-ignored).

With --profile the service runs under bench/search_profile_server.py (the same `serve`
code path with timing hooks) and a server-side split is added: embed wait, model forward,
text SQL (overlapping the embedding) and how long a request still waited for it after its
vector was ready, vector SQL, pipeline and the rest (validation, serialisation).

Run:   .venv/bin/python bench/search.py                 (10k then 100k rows)
       .venv/bin/python bench/search.py --quick         (10k rows, fewer queries, ~2-3 min)
       .venv/bin/python bench/search.py --rows 100000   (one size)
       add --profile for the server-side split, --show-plans for the statements' plans
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import dataclasses
import datetime as dt
import gc
import hashlib
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
import types
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import ingest as ing  # noqa: E402  (bench/ingest.py: generator, COPY helpers, process control)
from lean_http import LeanHttp  # noqa: E402

DIM = ing.DIM
HNSW_INDEX = ing.HNSW_INDEX
CLASSES = ("unscoped", "small_user", "large_user")
# The candidate SQL as timed from the bench: the text statement, the vector statement, and
# their sum per query.
SQL_PARTS = ("text", "vector", "sum")
log = ing.log
pct = ing.pct
fmt = ing.fmt
table = ing.table


# --------------------------------------------------------------------------- questions

REGULAR = [
    "What is {name} allergic to?",
    "Which food does {name} prefer for lunch?",
    "Where did {rel} move to, and what job did they start?",
    "When is the {event}?",
    "Who owns the {project} now?",
    "Where did the user lose the {thing}?",
    "How long has {name} been learning {hobby}?",
    "What does {rel} do for a living?",
    "Is {rel} travelling to {place} in {month}?",
    "Why was the {event} moved to {day}?",
    "How much did {name} pay for the {thing}?",
    "What is blocking the {project}?",
    "Does {name} drink coffee in the evening?",
    "what does the user like to do on a quiet afternoon",
    "what did {name} say about the {project} on {d} {month}",
    "any food the user cannot eat because of an allergy?",
    "who can help me with the weekly summary and the report before the meeting on {day}",
    "remind me about the appointment with my dentist",
    "{name}",
    "what is the user doing next week and who is helping with it and where",
    "is {name} free on {day} at {time} for the {event}",
    "which hobby does {rel} practise every week",
]
SUMMARY = [
    "Summarize what we discussed about the {project}",
    "give me an overview of {name}'s plans for {month}",
    "recap of the {event}",
    "tl;dr of everything about {place}",
]


def make_questions(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pool = SUMMARY if rng.random() < 0.15 else REGULAR
        out.append(
            rng.choice(pool).format(
                name=rng.choice(ing.NAMES),
                rel=rng.choice(ing.RELATIONS),
                event=rng.choice(ing.EVENTS),
                project=rng.choice(ing.PROJECTS),
                thing=rng.choice(ing.THINGS),
                hobby=rng.choice(ing.HOBBIES),
                place=rng.choice(ing.PLACES),
                month=rng.choice(ing.MONTHS),
                day=rng.choice(ing.DAYS),
                time=rng.choice(ing.TIMES),
                d=rng.randint(1, 28),
            )
        )
    return out


# --------------------------------------------------------------------------- layout


def user_sizes(rows: int, rng: np.random.Generator) -> tuple[np.ndarray, dict[str, Any]]:
    """A few large users, a few mid-sized, many small ones; sums to exactly `rows`."""
    fracs = [0.10, 0.08, 0.07, 0.06, 0.05] if rows >= 50_000 else [0.10, 0.08]
    big = [max(1500, int(f * rows)) for f in fracs]
    mid = [int(x) for x in rng.integers(200, 901, max(2, rows // 5000))]
    left = rows - sum(big) - sum(mid)
    if left < 200:
        raise ValueError(f"--rows {rows} is too small for the user layout")
    small: list[int] = []
    while left >= 100:
        s = int(rng.integers(50, 101))
        small.append(s)
        left -= s
    if left:
        if left >= 50:
            small.append(left)
        else:
            small[-1] += left
    sizes = np.array(big + mid + small, dtype=np.int64)
    assert int(sizes.sum()) == rows
    layout = {
        "users": len(sizes),
        "large": [int(x) for x in big],
        "mid_users": len(mid),
        "mid_rows": int(sum(mid)),
        "small_users": len(small),
        "small_rows_min_max": [min(small), max(small)],
    }
    return sizes, layout


def user_id(u: int) -> str:
    return f"user-{u:04d}"


# --------------------------------------------------------------------------- seeding


async def seed(
    args: argparse.Namespace,
    url: str,
    rows: int,
    base: np.ndarray,
    base_texts: list[str],
    tenant: uuid.UUID,
) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": rows}
    rng = np.random.default_rng(args.seed + rows)
    sizes, layout = user_sizes(rows, rng)
    out["layout"] = layout
    n_users = len(sizes)

    users = np.repeat(np.arange(n_users), sizes)
    rng.shuffle(users)
    n_real = min(len(base), rows // 2)
    real_of = np.full(rows, -1, dtype=np.int64)
    real_of[rng.choice(rows, n_real, replace=False)] = np.arange(n_real)
    out["real_vectors"] = n_real
    # Topic sets: the user's own real sentences, topped up with random ones.
    own: list[list[int]] = [[] for _ in range(n_users)]
    for rp in np.flatnonzero(real_of >= 0):
        own[int(users[rp])].append(int(real_of[rp]))
    topics = []
    for u, s in enumerate(sizes):
        k = int(np.clip(3 + 3 * np.log2(s), 3, 60))
        mine = list(own[u])
        if len(mine) < k:
            mine += [int(x) for x in rng.choice(n_real, k - len(mine), replace=False)]
        topics.append(np.array(mine, dtype=np.int64))

    conn = await ing.connect(url, binary_halfvec=True)
    try:
        await conn.execute(f"SET maintenance_work_mem = '{args.maintenance_work_mem}'")
        # Together: TRUNCATE fires no DELETE trigger, so emptying `memories` alone would
        # leave the previous size's statistics in `term_stats`; and `memory_versions`
        # references `memories` (migration 0018), which TRUNCATE refuses to leave behind.
        await conn.execute("TRUNCATE memories, memory_versions, term_stats")
        defs = await conn.fetch(
            """SELECT i.indexname, i.indexdef FROM pg_indexes i
               WHERE i.schemaname = 'public' AND i.tablename = 'memories'
                 AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                                 WHERE c.conindid = (quote_ident(i.indexname))::regclass)
               ORDER BY i.indexname"""
        )
        saved = {r["indexname"]: r["indexdef"] for r in defs}
        if HNSW_INDEX not in saved:
            raise RuntimeError(f"{HNSW_INDEX} not in pg_indexes: {sorted(saved)}")
        trig = await conn.fetchval(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'memories'::regclass "
            "AND tgname = 'memories_tsv' AND tgenabled <> 'D'"
        )
        if trig != 1:
            raise RuntimeError("the memories_tsv trigger (migration 0003) is missing")
        trig = await conn.fetchval(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'memories'::regclass "
            "AND tgname LIKE 'memories_term_stats_%' AND tgenabled <> 'D'"
        )
        if trig != 3:
            raise RuntimeError("the memories_term_stats triggers (migration 0004) are missing")
        for name in saved:
            await conn.execute(f'DROP INDEX "{name}"')

        now_ms = int(time.time() * 1000)
        ages_ms = np.sort(rng.integers(0, 365 * 86_400_000, rows))[::-1]
        scope_rng = types.SimpleNamespace(pyrng=random.Random(args.seed + 11))
        text_rng = random.Random(args.seed + 7)
        ordinal = np.zeros(n_users, dtype=np.int64)
        i_role = ing.COLUMNS.index("fact_role")
        i_exp = ing.COLUMNS.index("expires_at")
        gen_s = copy_s = 0.0
        chunk = 10_000
        for lo in range(0, rows, chunk):
            g0 = time.perf_counter()
            hi = min(rows, lo + chunk)
            n = hi - lo
            a = np.empty(n, dtype=np.int64)
            b = np.empty(n, dtype=np.int64)
            for j in range(n):
                tp = topics[int(users[lo + j])]
                a[j] = tp[rng.integers(len(tp))]
                b[j] = tp[rng.integers(len(tp))]
            w = rng.uniform(0.0, 0.5, n).astype(np.float32)[:, None]
            sigma = rng.uniform(0.015, 0.035, n).astype(np.float32)[:, None]
            noise = rng.standard_normal((n, DIM), dtype=np.float32)
            vecs = ing.normalise(base[a] + w * base[b] + sigma * noise)
            records = []
            for j in range(n):
                pos = lo + j
                u = int(users[pos])
                r = int(real_of[pos])
                ms = now_ms - int(ages_ms[pos])
                created = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
                scope = ing.scope_of(scope_rng, u, int(ordinal[u]))  # type: ignore[arg-type]
                ordinal[u] += 1
                content = base_texts[r] if r >= 0 else ing.make_sentence(text_rng)
                vec = base[r] if r >= 0 else vecs[j]
                row = list(
                    ing.db_row(
                        tenant,
                        ing.uuid7_at(ms, text_rng),
                        content,
                        scope,
                        created,
                        ing.halfvec_binary(vec),
                    )
                )
                x = text_rng.random()
                if x < 0.01:
                    row[i_role] = "summary"
                elif x < 0.02:  # expired
                    row[i_exp] = created + dt.timedelta(days=text_rng.uniform(1, 30))
                    if row[i_exp].timestamp() * 1000 > now_ms:
                        row[i_exp] = dt.datetime.fromtimestamp(now_ms / 1000 - 3600, dt.UTC)
                elif x < 0.03:  # expires later
                    row[i_exp] = dt.datetime.fromtimestamp(
                        now_ms / 1000 + text_rng.uniform(1, 90) * 86400, dt.UTC
                    )
                records.append(tuple(row))
            c0 = time.perf_counter()
            gen_s += c0 - g0
            await conn.copy_records_to_table("memories", records=records, columns=ing.COLUMNS)
            copy_s += time.perf_counter() - c0
        log(
            f"COPY {rows:,} rows: {copy_s:.1f} s in PostgreSQL incl. the tsv trigger "
            f"({rows / copy_s:,.0f} rows/s), {gen_s:.1f} s generating rows"
        )
        out.update({"copy_s": copy_s, "generate_s": gen_s})

        tsv = await conn.fetchrow(
            """SELECT count(*) FILTER (WHERE tsv IS NULL) AS null_tsv,
                      count(*) FILTER (WHERE tsv @@ to_tsquery('english', to_char(
                          created_at AT TIME ZONE 'UTC', 'YYYY')))::float8
                        / count(*) AS dated
               FROM memories"""
        )
        if tsv["null_tsv"] or tsv["dated"] < 0.99:
            raise RuntimeError(f"tsv not filled by the trigger on COPY: {dict(tsv)}")
        out["tsv_check"] = "trigger filled tsv on every COPYed row (content + date)"

        # term_stats, written by the statement triggers on each COPY: the corpus row,
        # every lexeme's df and every tag's, category's and user's rows (keys starting
        # with a space, migrations 0009, 0013) must match the table (no archived rows are
        # seeded).
        corpus = await conn.fetchrow(
            """SELECT (SELECT coalesce(sum(df), 0) FROM term_stats WHERE lexeme = '') AS n,
                      (SELECT coalesce(sum(total_len), 0) FROM term_stats WHERE lexeme = '')
                        AS len,
                      (SELECT count(*) FROM memories WHERE archived_at IS NULL) AS rows,
                      (SELECT coalesce(sum(length(tsv)), 0) FROM memories
                        WHERE archived_at IS NULL) AS rows_len"""
        )
        bad_df = await conn.fetchval(
            """SELECT count(*) FROM
                 (SELECT word, ndoc FROM ts_stat(
                    'SELECT tsv FROM memories WHERE archived_at IS NULL')) a
               FULL JOIN (SELECT lexeme, sum(df) AS df FROM term_stats
                          WHERE lexeme <> '' AND lexeme NOT LIKE ' %'
                          GROUP BY lexeme HAVING sum(df) <> 0) b ON b.lexeme = a.word
               WHERE a.ndoc IS DISTINCT FROM b.df"""
        ) + await conn.fetchval(
            """SELECT count(*) FROM
                 (SELECT ' tag:' || d.t AS key, count(*) AS n
                  FROM memories m CROSS JOIN LATERAL (SELECT DISTINCT unnest(m.tags)) d(t)
                  WHERE m.archived_at IS NULL GROUP BY d.t
                  UNION ALL
                  SELECT ' category:' || category, count(*) FROM memories
                  WHERE archived_at IS NULL GROUP BY category
                  UNION ALL
                  SELECT ' user:' || user_id, count(*) FROM memories
                  WHERE archived_at IS NULL AND user_id IS NOT NULL GROUP BY user_id) a
               FULL JOIN (SELECT lexeme, sum(df) AS df FROM term_stats WHERE lexeme LIKE ' %'
                          GROUP BY lexeme HAVING sum(df) <> 0) b ON b.lexeme = a.key
               WHERE a.n IS DISTINCT FROM b.df"""
        )
        if corpus["n"] != corpus["rows"] or corpus["len"] != corpus["rows_len"] or bad_df:
            raise RuntimeError(
                f"term_stats does not match memories: {dict(corpus)}, {bad_df} keys off"
            )
        # Fold the delta rows (one per lexeme and COPY) into one row per lexeme, as the
        # service's background fold keeps them: searches read the folded state.
        deltas = await conn.fetchval("SELECT count(*) FROM term_stats")
        async with conn.transaction():
            await conn.execute(
                """CREATE TEMP TABLE folded ON COMMIT DROP AS
                   SELECT tenant_id, lexeme, sum(df) AS df, sum(total_len) AS total_len
                   FROM term_stats GROUP BY tenant_id, lexeme
                   HAVING sum(df) <> 0 OR sum(total_len) <> 0"""
            )
            await conn.execute("TRUNCATE term_stats")
            await conn.execute(
                """INSERT INTO term_stats (tenant_id, lexeme, df, total_len, folded)
                   SELECT tenant_id, lexeme, df, total_len, true FROM folded"""
            )
        out["term_stats"] = {
            "delta_rows": int(deltas),
            "folded_rows": int(await conn.fetchval("SELECT count(*) FROM term_stats")),
        }
        log(
            f"term_stats matches memories ({int(corpus['n']):,} rows); {deltas:,} delta rows "
            f"folded into {out['term_stats']['folded_rows']:,}"
        )

        builds: dict[str, float] = {}
        for name in sorted(saved, key=lambda x: x == HNSW_INDEX):  # HNSW last
            t = time.perf_counter()
            await conn.execute(saved[name])
            builds[name] = time.perf_counter() - t
        after = {
            r["indexname"]: r["indexdef"]
            for r in await conn.fetch(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories'"
            )
        }
        bad = [k for k in saved if after.get(k) != saved[k]]
        if bad:
            raise RuntimeError(f"recreated indexes differ from the migration: {bad}")
        log(f"indexes rebuilt in {sum(builds.values()):.1f} s (HNSW {builds[HNSW_INDEX]:.1f} s)")
        t = time.perf_counter()
        await conn.execute("VACUUM ANALYZE memories")
        await conn.execute("VACUUM ANALYZE term_stats")
        out["vacuum_analyze_s"] = time.perf_counter() - t
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        blocks = await conn.fetchval(
            """SELECT sum(pg_prewarm(c.oid)) FROM pg_class c
               WHERE c.oid IN ('memories'::regclass, 'term_stats'::regclass) OR c.oid IN
                 (SELECT indexrelid FROM pg_index
                  WHERE indrelid IN ('memories'::regclass, 'term_stats'::regclass))"""
        )
        sz = await conn.fetchrow(
            f"""SELECT pg_size_pretty(pg_table_size('memories')) AS heap,
                       pg_size_pretty(pg_relation_size('{HNSW_INDEX}')) AS hnsw,
                       pg_size_pretty(pg_relation_size('ix_memories_tsv_scope')) AS gin,
                       pg_size_pretty(pg_indexes_size('memories')) AS indexes"""
        )
        out.update(
            {
                "index_build_s": sum(builds.values()),
                "hnsw_build_s": builds[HNSW_INDEX],
                "prewarmed_mib": int(blocks or 0) * 8 // 1024,
                **dict(sz),
                "count": int(await conn.fetchval("SELECT count(*) FROM memories")),
            }
        )
        log(
            f"sizes: heap {sz['heap']}, HNSW {sz['hnsw']}, GIN {sz['gin']}, all indexes "
            f"{sz['indexes']}; prewarmed {out['prewarmed_mib']} MiB"
        )

        # The users the scoped queries use, read back from the table.
        counts = {
            r["user_id"]: int(r["n"])
            for r in await conn.fetch(
                "SELECT user_id, count(*) AS n FROM memories GROUP BY user_id"
            )
        }
        out["large_user"] = max(counts, key=lambda k: counts[k])
        out["large_user_rows"] = counts[out["large_user"]]
        out["small_users"] = sorted(k for k, v in counts.items() if 50 <= v <= 100)
        # Common-word statistics, to read the text half's figures.
        out["common_terms"] = {
            r["word"]: int(r["ndoc"])
            for r in await conn.fetch(
                """SELECT word, ndoc FROM ts_stat('SELECT tsv FROM memories')
               ORDER BY ndoc DESC LIMIT 8"""
            )
        }
    finally:
        await conn.close()
    # The rows were written outside the service, so no model was recorded for their
    # vectors, and since 2026-12-01 a start re-embeds the newest rows to check: the
    # cheaper half's vectors do not match, and the service refused to start.
    await ing.adopt_vector_space(url, "local")
    return out


# --------------------------------------------------------------------------- measuring


# auto_explain, set at session level on the plan-capturing connection only (PlanCapture):
# it logs the plan each statement really ran -- the generic plan the service uses -- with
# EXPLAIN ANALYZE's figures, as a NOTICE the asyncpg connection hands to a log listener.
AUTO_EXPLAIN = {
    "auto_explain.log_min_duration": "0",
    "auto_explain.log_analyze": "on",
    "auto_explain.log_buffers": "on",
    "auto_explain.log_timing": "on",
    "auto_explain.log_nested_statements": "off",
    "auto_explain.log_level": "notice",
    "client_min_messages": "notice",
}
_DURATION = re.compile(r"duration: ([0-9.]+) ms\s+plan:\s*", re.S)
_VECTOR_LITERAL = re.compile(r"'\[[-+0-9.e,]{100,}\]'")
# The text statement's CTEs, grouped as the report shows them (small and matched apart):
# the term_stats lookups and tsqueries; BM25 scoring and the text top list (bm25 is
# inlined into txt).
STATS_CTES = ("terms", "query", "tenant_stats", "rare_lexemes", "rare_terms")
SCORE_CTES = ("postings", "collection", "idf", "bm25", "txt")
# The two candidate statements, in the order the service runs them.
STATEMENTS = ("text", "vector")
# A one-time filter on a bound parameter: the vector statement's gate on `small`, `$n` for
# the exact branch and `(NOT $n)` for HNSW in a generic plan (a custom plan folds it).
_PARAMETER_GATE = re.compile(r"^\(*(NOT\s+)?\$\d+\)*$")
_PARAMETER = re.compile(r"\$\d+\b")


def statement_of(query: str) -> str | None:
    """Which candidate statement a query text is: "text" (text_matches), "vector"
    (candidates), or None (type introspection, SHOW, ...)."""
    if "rare_terms" in query and "vec_ann" not in query:
        return "text"
    if "vec_ann" in query:
        return "vector"
    return None


def parse_auto_explain(messages: list[str], fmt: str) -> dict[str, dict[str, Any]]:
    """The candidate statements' plans among auto_explain's NOTICEs, by statement ("text",
    "vector"; the last of each), skipping the other statements (type introspection)."""
    found: dict[str, dict[str, Any]] = {}
    for msg in messages:
        m = _DURATION.match(msg)
        if not m:
            continue
        body = msg[m.end() :]
        doc = json.loads(body) if fmt == "json" else None
        query = doc.get("Query Text", "") if doc is not None else body
        kind = statement_of(query)
        if kind is None:
            continue
        entry: dict[str, Any] = {"duration_ms": float(m.group(1))}
        if doc is not None:
            entry["doc"] = doc
        else:
            lines = body.splitlines()  # "Query Text: <sql>" first, then the plan
            top = next((k for k, line in enumerate(lines) if "actual time=" in line), 0)
            # A custom plan would spell the query vector out, several times: shortened.
            entry["text"] = _VECTOR_LITERAL.sub("'[<query vector>]'", "\n".join(lines[top:]))
        found[kind] = entry
    return found


def _index_rows(n: dict[str, Any], acc: dict[str, float]) -> dict[str, float]:
    """The indexes that ran under `n`, with the rows they returned (added to `acc`)."""
    if n.get("Index Name") and n.get("Actual Loops", 0) > 0:
        acc[n["Index Name"]] = acc.get(n["Index Name"], 0) + n.get("Actual Rows", 0) * n.get(
            "Actual Loops", 0
        )
    for c in n.get("Plans", []):
        _index_rows(c, acc)
    return acc


def _gated_branches(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The branches under `node` gated by a one-time filter on `small` (in the text
    statement the `small` CTE's InitPlan, in the vector statement the bound parameter):
    the filter, whether it is on a parameter, whether it is the negated one (the
    large-scope branch), whether the branch below the Result ran (its filter was true), its
    rows, and the indexes that ran in it (with the rows they returned). (The exact branch
    sorts above its Result: Limit, Sort, Result.)"""
    out: list[dict[str, Any]] = []

    def walk(n: dict[str, Any]) -> None:
        flt = n.get("One-Time Filter")
        if flt is not None:
            below = [
                c
                for c in n.get("Plans", [])
                if c.get("Parent Relationship") not in ("InitPlan", "SubPlan")
            ]
            acc: dict[str, float] = {}
            for c in below:
                _index_rows(c, acc)
            out.append(
                {
                    "filter": flt,
                    "on_parameter": _PARAMETER_GATE.match(flt.strip()) is not None,
                    "large": re.search(r"\bNOT\b", flt) is not None,
                    "ran": any(c.get("Actual Loops", 0) > 0 for c in below),
                    "rows": n.get("Actual Rows", 0) * n.get("Actual Loops", 0),
                    "indexes": acc,
                }
            )
            return
        for c in n.get("Plans", []):
            walk(c)

    walk(node)
    return out


def _statement_times(
    doc: dict[str, Any], tenant: uuid.UUID
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One statement's figures from its auto_explain JSON: each CTE's own time (its
    inclusive time less the CTE scans under it, which run the CTEs it reads first) and
    rows, the executor time, what the final select adds to its CTEs, and whether the plan
    is generic (its filters hold `$n` parameters; a custom plan has the values, e.g. the
    tenant id, in it). Also each CTE's plan node, by name."""
    plan = doc["Plan"]
    ctes: dict[str, dict[str, float]] = {}
    subtrees: dict[str, dict[str, Any]] = {}

    def cte_scan_ms(node: dict[str, Any]) -> float:
        ms = 0.0
        for child in node.get("Plans", []):
            if child.get("Node Type") == "CTE Scan":
                ms += child.get("Actual Total Time", 0.0) * child.get("Actual Loops", 0)
            ms += cte_scan_ms(child)
        return ms

    def walk(node: dict[str, Any]) -> None:
        name = node.get("Subplan Name", "")
        if name.startswith("CTE "):
            cte = name[4:]
            subtrees[cte] = node
            loops = node.get("Actual Loops", 0)
            total = node.get("Actual Total Time", 0.0) * loops
            ctes[cte] = {
                "ms": max(0.0, total - cte_scan_ms(node)),
                "inclusive_ms": total,
                "rows": node.get("Actual Rows", 0) * loops,
            }
        for child in node.get("Plans", []):
            walk(child)

    walk(plan)
    execution = plan.get("Actual Total Time", 0.0)
    dumped = json.dumps(plan)
    return {
        "ctes": ctes,
        "execution_ms": execution,
        "outside_ctes_ms": max(0.0, execution - sum(c["ms"] for c in ctes.values())),
        "generic": str(tenant) not in dumped and _PARAMETER.search(dumped) is not None,
    }, subtrees


def text_plan(doc: dict[str, Any], tenant: uuid.UUID) -> dict[str, Any]:
    """The text statement (text_matches): its CTE own times and executor time (see
    `_statement_times`), and which gated branch of `matched` ran (and the indexes in it)."""
    out, subtrees = _statement_times(doc, tenant)
    # matched: the branch whose gated Result ran (a small scope may match no row).
    matched = _gated_branches(subtrees["matched"]) if "matched" in subtrees else []
    ran = [b for b in matched if b["ran"]]
    out["small"] = not ran[0]["large"] if len(ran) == 1 else None
    out["text_path"] = (
        "; ".join(
            ("large: " if b["large"] else "small: ")
            + ("+".join(sorted(b["indexes"])) or "seq scan")
            for b in ran
        )
        or "none ran"
    )
    return out


def vector_plan(doc: dict[str, Any], tenant: uuid.UUID) -> dict[str, Any]:
    """The vector statement (candidates): its CTE own times and executor time (see
    `_statement_times`), and which branch of `vec` ran: the one whose Result, gated on the
    `small` parameter (`$n` exact, `(NOT $n)` HNSW), produced rows (the exact ranking,
    or HNSW if the HNSW index returned rows)."""
    out, subtrees = _statement_times(doc, tenant)

    def sorted_by_distance(n: dict[str, Any]) -> bool:
        """A Sort on a `<=>` expression that returned rows (the exact ranking)."""
        return bool(
            n.get("Node Type") == "Sort"
            and n.get("Actual Rows", 0) > 0
            and any("<=>" in k for k in n.get("Sort Key", []))
        ) or any(sorted_by_distance(c) for c in n.get("Plans", []))

    node = subtrees.get("vec", {})
    gates = _gated_branches(node)
    vec = [b for b in gates if b["on_parameter"]]
    produced = [b for b in vec if b["rows"] > 0] or [b for b in vec if b["ran"]]
    everywhere = _index_rows(node, {})
    hnsw_rows = everywhere.get(HNSW_INDEX, 0)
    if not vec and node:
        # No gate on the parameter (a custom plan folds it, dropping a branch): what ran.
        produced = [{"large": hnsw_rows > 0, "indexes": everywhere}]
    paths = []
    for b in produced:
        if b["large"]:
            paths.append("HNSW" if hnsw_rows > 0 else "HNSW branch, no HNSW rows")
        else:
            used = sorted(k for k, v in b["indexes"].items() if v > 0)
            paths.append(
                "exact: "
                + ("+".join(used) or "seq scan")
                + (" + sort" if sorted_by_distance(node) else "")
            )
    if len(vec) != 2:
        paths.append(f"{len(vec)} vec branches gated on the parameter")
    out["vec_path"] = ", ".join(paths) or "none produced rows"
    out["hnsw_rows"] = hnsw_rows
    return out


class PlanCapture:
    """The plans the service runs, for both candidate statements: a dedicated asyncpg
    connection with the search pool's connection settings (app.search.reader's
    search_server_settings: generic plans, no parallel workers, the HNSW settings), with
    auto_explain loaded and set for the session and a log listener, passed to
    SearchRepository as its Fetcher. Each statement is prepared once on it and runs
    its generic plan, as on the service's pool."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.messages: list[str] = []
        conn.add_log_listener(self._listener)

    def _listener(self, _conn: Any, message: Any) -> None:
        self.messages.append(str(getattr(message, "message", message)))

    @classmethod
    async def open(cls, engine: Any, settings: Any) -> PlanCapture:
        from app.db import asyncpg_dsn
        from app.search.reader import search_server_settings

        conn = await asyncpg.connect(
            asyncpg_dsn(engine), server_settings=search_server_settings(settings)
        )
        try:
            await conn.execute("LOAD 'auto_explain'")
            for key, value in AUTO_EXPLAIN.items():
                await conn.execute(f"SET {key} = '{value}'")
        except BaseException:
            await conn.close()
            raise
        return cls(conn)

    async def settings(self) -> dict[str, str]:
        """The session's search settings (set by the connection, as on the pool)."""
        out = {}
        for name in (
            "plan_cache_mode",
            "max_parallel_workers_per_gather",
            "hnsw.ef_search",
            "hnsw.iterative_scan",
        ):
            out[name] = str(await self.conn.fetchval(f"SHOW {name}"))
        return out

    async def search(
        self,
        tenant: uuid.UUID,
        question: str,
        vector: Sequence[float],
        filters: Any,
        limits: Any,
        fmt: str,
    ) -> tuple[dict[str, dict[str, Any]], Any, list[Any]]:
        """text_matches then candidates, as the service runs them (no embedding: the
        vector is given); returns both statements' plans, the TextMatches and the rows."""
        from app.search.repository import SearchRepository

        await self.conn.execute(f"SET auto_explain.log_format = '{fmt}'")
        self.messages.clear()
        repo = SearchRepository(self.conn, tenant)
        text = await repo.text_matches(question, filters, limits)
        rows = await repo.candidates(text, vector, filters, limits, 10)
        await asyncio.sleep(0)  # log listeners are called soon, not at once
        plans = parse_auto_explain(self.messages, fmt)
        missing = [k for k in STATEMENTS if k not in plans]
        if missing:
            raise RuntimeError(
                f"auto_explain logged no plan for the {' and '.join(missing)} statement; got: "
                + "; ".join(m[:120] for m in self.messages)
            )
        return plans, text, rows

    async def close(self) -> None:
        self.conn.remove_log_listener(self._listener)
        await self.conn.close()


@dataclasses.dataclass
class ServiceSide:
    """For the benchmarks beside this one: the service's own search repository and limits
    on a seeded database (its asyncpg pool, as the service opens it), and the real server
    (local model) on `port`, ready."""

    repo: Any
    limits: Any
    port: int
    close: Callable[[], Awaitable[None]]


async def open_service(cleanup: ing.Cleanup, url: str, tmp: Path) -> ServiceSide:
    from app.db import create_engine
    from app.models import DEFAULT_TENANT_ID
    from app.search.config import build_limits
    from app.search.reader import SearchReader
    from app.search.repository import SearchRepository
    from app.settings import Settings

    settings = Settings(database_url=url, _env_file=None)  # type: ignore[call-arg]
    engine = create_engine(settings.async_database_url or url, settings)
    reader = await SearchReader.open(engine, settings)
    port = ing.free_port()
    # Every request embeds its query, as in the runs these benches compare with (the
    # benches ask one question many times: the query cache would answer most of them).
    proc, log_path = ing.start_server(cleanup, url, "local", port, tmp, None,
                                      {"ENGRAM_SEARCH_QUERY_CACHE_SIZE": "0"})
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        await ing.wait_ready(proc, http, log_path, 240.0)

    async def close() -> None:
        await reader.close()
        await engine.dispose()

    return ServiceSide(SearchRepository(reader, DEFAULT_TENANT_ID), build_limits(settings),
                       port, close)


async def timed(n: int, call: Callable[[int], Awaitable[Any]]) -> tuple[list[float], list[Any]]:
    """`call(i)` for i in range(n), one after the other: (milliseconds, results)."""
    times: list[float] = []
    out: list[Any] = []
    for i in range(n):
        t = time.perf_counter()
        out.append(await call(i))
        times.append((time.perf_counter() - t) * 1000)
    return times, out


def body_for(cls: str, q: str, i: int, small_users: list[str], large_user: str) -> dict[str, Any]:
    body: dict[str, Any] = {"query": q, "top_k": 10}
    if cls == "small_user":
        body["user_id"] = small_users[(i * 7919) % len(small_users)]
    elif cls == "large_user":
        body["user_id"] = large_user
    return body


async def measure_size(
    args: argparse.Namespace,
    cleanup: ing.Cleanup,
    url: str,
    pm_pid: int | None,
    model: Any,
    encoder: Any,
    questions: list[str],
    qvecs: np.ndarray,
    seeded: dict[str, Any],
    tmp: Path,
) -> dict[str, Any]:
    from app.db import create_engine
    from app.models import DEFAULT_TENANT_ID
    from app.search.config import build_limits
    from app.search.reader import SearchReader
    from app.search.repository import RetrievalLimits, SearchFilter, SearchRepository
    from app.settings import Settings

    settings = Settings(database_url=url, _env_file=None)
    limits = build_limits(settings)
    small_users: list[str] = seeded["small_users"]
    large_user: str = seeded["large_user"]
    n_q = len(questions)
    out: dict[str, Any] = {"limits": dataclasses.asdict(limits)}

    port = ing.free_port()
    profile_out = tmp / f"profile-{seeded['rows']}.json" if args.profile else None
    proc, log_path = start_server(cleanup, url, port, tmp, profile_out, args.query_cache)
    engine = create_engine(settings.async_database_url or url, settings)
    # The search's own pool, as the service opens it (app/search/reader.py).
    reader = await SearchReader.open(engine, settings)
    raw = await ing.connect(url)
    try:
        await raw.execute(f"SET hnsw.ef_search = {settings.hnsw_ef_search}")
        await raw.execute("SET plan_cache_mode = force_custom_plan")
        await raw.execute("SET hnsw.iterative_scan = relaxed_order")
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(120.0)
        ) as client:
            out["ready_s"] = await ing.wait_ready(proc, client, log_path, 240.0)
            log(f"service ready in {out['ready_s']:.1f} s on port {port} (pid {proc.pid})")
            probe = ing.CpuProbe(pm_pid, proc.pid)

            def filt(cls: str, i: int) -> SearchFilter:
                b = body_for(cls, "", i, small_users, large_user)
                return SearchFilter(user_id=b.get("user_id"))

            async def post(body: dict[str, Any], tag: str) -> tuple[float, int]:
                t = time.perf_counter()
                r = await client.post("/v1/search", json=body, headers={"x-bench-class": tag})
                ms = (time.perf_counter() - t) * 1000
                if r.status_code != 200:
                    raise RuntimeError(f"POST /v1/search -> {r.status_code}: {r.text[:300]}")
                return ms, len(r.json()["results"])

            lean = LeanHttp(port)

            async def post_lean(body: dict[str, Any]) -> float:
                """The same request through LeanHttp, tagged apart so that the server-side
                split (--profile) holds the httpx requests only."""
                t = time.perf_counter()
                status, answer = await lean.post("/v1/search", body, "lean")
                json.loads(answer)
                ms = (time.perf_counter() - t) * 1000
                if status != 200:
                    raise RuntimeError(f"POST /v1/search -> {status}: {answer[:300]!r}")
                return ms

            async def timed_sql(cls: str, i: int, lim: RetrievalLimits) -> tuple[float, float]:
                """The two statements as the service runs them on its pool, each timed in
                ms: text_matches (one round trip), then candidates with its TextMatches and
                the query vector (one round trip, building the RetrievedRows). No
                embedding: in the service the text statement overlaps it."""
                f, vec = filt(cls, i), qvecs[i].tolist()
                repo = SearchRepository(reader, DEFAULT_TENANT_ID)
                t0 = time.perf_counter()
                text = await repo.text_matches(questions[i], f, lim)
                t1 = time.perf_counter()
                await repo.candidates(text, vec, f, lim, 10)
                return (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000

            hnsw_sql = (
                "SELECT id FROM memories WHERE tenant_id = $1 AND archived_at IS NULL {f}"
                "ORDER BY embedding <=> $2::text::halfvec(384) LIMIT 10"
            )

            def vtext(i: int) -> str:
                return "[" + ",".join(f"{x:.6f}" for x in qvecs[i].tolist()) + "]"

            # Plans of the floor queries, checked before timing them.
            plan = "\n".join(
                r[0]
                for r in await raw.fetch(
                    "EXPLAIN " + hnsw_sql.format(f=""), DEFAULT_TENANT_ID, vtext(0)
                )
            )
            if HNSW_INDEX not in plan:
                raise RuntimeError(f"the HNSW floor query does not use HNSW:\n{plan}")
            plan = "\n".join(
                r[0]
                for r in await raw.fetch(
                    "EXPLAIN " + hnsw_sql.format(f="AND user_id = $3 "),
                    DEFAULT_TENANT_ID,
                    vtext(0),
                    large_user,
                )
            )
            out["hnsw_large_user_path"] = "HNSW" if HNSW_INDEX in plan else "btree + sort"

            # Warm-up: imports, pool connections, model, caches.
            for i in range(args.warmup):
                for cls in CLASSES:
                    await post(body_for(cls, questions[i], i, small_users, large_user), "warmup")
                    await post_lean(body_for(cls, questions[i], i, small_users, large_user))
                    await timed_sql(cls, i, limits)
                ing.encode(model, [questions[i]])
                encoder.encode([questions[i]])

            lat: dict[str, list[float]] = {c: [] for c in CLASSES}
            lat_lean: dict[str, list[float]] = {c: [] for c in CLASSES}
            empty: dict[str, int] = dict.fromkeys(CLASSES, 0)
            # Per class: the text statement, the vector statement, their sum (per query).
            sql: dict[str, dict[str, list[float]]] = {
                c: {k: [] for k in SQL_PARTS} for c in CLASSES
            }
            emb: list[float] = []
            emb_ref: list[float] = []
            hnsw: list[float] = []
            hnsw_large: list[float] = []
            cpu = []
            seq_windows: list[tuple[float, float]] = []
            per_round = max(1, args.queries // args.rounds)
            order = list(range(args.warmup, n_q))
            for rnd in range(args.rounds):
                idx = order[rnd * per_round : (rnd + 1) * per_round]
                a = probe.snap()
                w0 = time.time()
                for i in idx:  # classes and clients interleaved query by query
                    for cls in CLASSES:
                        body = body_for(cls, questions[i], i, small_users, large_user)
                        # Each client goes first every other query: the second request
                        # of a pair reads rows the first just read.
                        if i % 2:
                            lat_lean[cls].append(await post_lean(body))
                        ms, n = await post(body, cls)
                        lat[cls].append(ms)
                        empty[cls] += n == 0
                        if not i % 2:
                            lat_lean[cls].append(await post_lean(body))
                seq_windows.append((w0, time.time()))
                for i in idx:
                    t = time.perf_counter()
                    encoder.encode([questions[i]])
                    emb.append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    ing.encode(model, [questions[i]])
                    emb_ref.append((time.perf_counter() - t) * 1000)
                for i in idx:
                    t = time.perf_counter()
                    await raw.fetch(hnsw_sql.format(f=""), DEFAULT_TENANT_ID, vtext(i))
                    hnsw.append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    await raw.fetch(
                        hnsw_sql.format(f="AND user_id = $3 "),
                        DEFAULT_TENANT_ID,
                        vtext(i),
                        large_user,
                    )
                    hnsw_large.append((time.perf_counter() - t) * 1000)
                for i in idx:
                    for cls in CLASSES:
                        t_ms, v_ms = await timed_sql(cls, i, limits)
                        for part, ms in zip(SQL_PARTS, (t_ms, v_ms, t_ms + v_ms), strict=True):
                            sql[cls][part].append(ms)
                d = probe.delta(a, probe.snap())
                cpu.append(d)
                log(
                    f"round {rnd + 1}/{args.rounds}: HTTP p50 unscoped "
                    f"{pct(lat['unscoped'], 50):.1f} / small {pct(lat['small_user'], 50):.1f}"
                    f" / large {pct(lat['large_user'], 50):.1f} ms; embed p50 "
                    f"{pct(emb, 50):.1f} ms; other load "
                    f"{d['other_cpu_s'] / d['wall_s']:.2f} cores"
                )

            def stats(xs: list[float]) -> dict[str, float]:
                return {
                    "n": len(xs),
                    "p50": pct(xs, 50),
                    "p95": pct(xs, 95),
                    "mean": float(np.mean(xs)) if xs else float("nan"),
                }

            out["http"] = {c: {**stats(lat[c]), "empty": empty[c]} for c in CLASSES}
            out["http_lean"] = {c: stats(lat_lean[c]) for c in CLASSES}
            if args.query_cache:
                # Every measured question has been asked by now: each is asked again,
                # and its vector comes from the query cache.
                again: dict[str, list[float]] = {c: [] for c in CLASSES}
                for i in order[: args.what_if]:
                    for cls in CLASSES:
                        body = body_for(cls, questions[i], i, small_users, large_user)
                        again[cls].append(await post_lean(body))
                out["http_lean_repeated"] = {c: stats(again[c]) for c in CLASSES}
                out["query_vectors"] = await query_vector_counts(client)
            await lean.close()
            out["sql"] = {c: {k: stats(sql[c][k]) for k in SQL_PARTS} for c in CLASSES}
            out["embed"] = stats(emb)
            out["embed_reference"] = stats(emb_ref)
            out["hnsw"] = stats(hnsw)
            out["hnsw_large_user"] = stats(hnsw_large)
            wall = sum(d["wall_s"] for d in cpu)
            out["sequential_cpu"] = {
                k: sum(d[k] for d in cpu) / wall for k in cpu[0] if k != "wall_s"
            }

            # What-if: the same statements with other limits (not the service's settings),
            # to size what the text match cap and the exact/HNSW switch cost.
            variants = {
                "service settings": limits,
                "text_match_cap 200": dataclasses.replace(limits, text_match_cap=200),
                "exact_below 250": dataclasses.replace(limits, exact_below=250),
            }
            what_if: dict[str, dict[str, dict[str, list[float]]]] = {
                v: {c: {k: [] for k in SQL_PARTS} for c in CLASSES} for v in variants
            }
            for i in order[: args.what_if]:
                for cls in CLASSES:
                    for vname, lim in variants.items():
                        t_ms, v_ms = await timed_sql(cls, i, lim)
                        for part, ms in zip(SQL_PARTS, (t_ms, v_ms, t_ms + v_ms), strict=True):
                            what_if[vname][cls][part].append(ms)
            out["what_if"] = {
                v: {
                    "limits": dataclasses.asdict(variants[v]),
                    **{c: {k: stats(what_if[v][c][k]) for k in SQL_PARTS} for c in CLASSES},
                }
                for v in variants
            }

            # Throughput: 8 concurrent clients over a bounded number of mixed requests.
            bodies = [
                body_for(CLASSES[i % 3], questions[i % n_q], i, small_users, large_user)
                for i in range(args.concurrent_requests)
            ]
            queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
            for b in bodies:
                queue.put_nowait(b)
            clat: list[float] = []

            async def worker() -> None:
                while True:
                    try:
                        b = queue.get_nowait()
                    except asyncio.QueueEmpty:
                        return
                    ms, _ = await post(b, "concurrent")
                    clat.append(ms)

            a = probe.snap()
            t = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(args.clients)))
            wall_c = time.perf_counter() - t
            d = probe.delta(a, probe.snap())
            out["concurrent"] = {
                "clients": args.clients,
                "requests": len(clat),
                "wall_s": wall_c,
                "rps": len(clat) / wall_c,
                **stats(clat),
                "server_cores": d["server_cpu_s"] / wall_c,
                "pg_cores": d["pg_cpu_s"] / wall_c,
                "bench_cores": d["bench_cpu_s"] / wall_c,
                "other_cores": d["other_cpu_s"] / wall_c,
            }
            log(
                f"{args.clients} clients: {out['concurrent']['rps']:.0f} req/s, p50 "
                f"{out['concurrent']['p50']:.1f} ms, p95 {out['concurrent']['p95']:.1f} ms"
            )

            # Plans: the generic plans the service runs, captured with auto_explain on a
            # dedicated connection with the search pool's settings, for a sample of each
            # class; both statements of each search.
            plans: dict[str, list[dict[str, Any]]] = {c: [] for c in CLASSES}
            texts: dict[str, dict[str, str]] = {}
            capture = await PlanCapture.open(engine, settings)
            try:
                out["session_settings"] = await capture.settings()

                async def explained(cls: str, i: int, fmt: str) -> Any:
                    return await capture.search(
                        DEFAULT_TENANT_ID,
                        questions[i],
                        qvecs[i].tolist(),
                        filt(cls, i),
                        limits,
                        fmt,
                    )

                # Warm-up, not kept: the connection's first statements prepare the plans
                # and load the backend's caches (the pool's connections are warm).
                for cls in CLASSES:
                    await explained(cls, args.warmup, "json")
                for k in range(args.explain):
                    i = args.warmup + k
                    for cls in CLASSES:
                        got, text, got_rows = await explained(cls, i, "json")
                        t_plan = text_plan(got["text"]["doc"], DEFAULT_TENANT_ID)
                        v_plan = vector_plan(got["vector"]["doc"], DEFAULT_TENANT_ID)
                        plans[cls].append(
                            {
                                "query": questions[i],
                                "user_id": filt(cls, i).user_id,
                                "small": text.small,
                                "rows": len(got_rows),
                                "text_hits": sum(r.text_rank is not None for r in got_rows),
                                "vector_hits": sum(r.vector_rank is not None for r in got_rows),
                                "text": {**t_plan, "duration_ms": got["text"]["duration_ms"]},
                                "vector": {
                                    **v_plan,
                                    "duration_ms": got["vector"]["duration_ms"],
                                },
                                "generic": t_plan["generic"] and v_plan["generic"],
                            }
                        )
                        if k == 0 and args.show_plans:
                            got, _, _ = await explained(cls, i, "text")
                            texts[cls] = {st: got[st]["text"] for st in STATEMENTS}
            finally:
                await capture.close()
            kinds = sorted(
                {
                    f"{st} {'generic' if p[st]['generic'] else 'custom'}"
                    for c in CLASSES
                    for p in plans[c]
                    for st in STATEMENTS
                }
            )
            log(f"plans captured: {', '.join(kinds)}")
            out["plans"] = plans
            out["plan_text"] = texts
    finally:
        await raw.close()
        await reader.close()
        await engine.dispose()
        await asyncio.to_thread(cleanup.stop_server, proc)
    if profile_out is not None:
        out["server"] = server_split(profile_out, seq_windows)
    return out


def start_server(
    cleanup: ing.Cleanup, url: str, port: int, tmp: Path, profile_out: Path | None,
    query_cache: int = 0,
) -> tuple[subprocess.Popen[bytes], Path]:
    """`python -m app serve` (or, with --profile, the same under search_profile_server.py),
    keeping `query_cache` query vectors (0: every search embeds its query)."""
    env = dict(os.environ)
    env.update(
        {
            "ENGRAM_DATABASE_URL": url,
            "ENGRAM_PORT": str(port),
            "ENGRAM_HOST": "127.0.0.1",
            "ENGRAM_EMBEDDER": "local",
            "ENGRAM_AUTH_ENABLED": "false",
            "ENGRAM_SEARCH_QUERY_CACHE_SIZE": str(query_cache),
            "ENGRAM_DATA_DIR": str(tmp / "engram-data"),
            "ENGRAM_MODEL_CACHE_DIR": str(ing.model_cache_dir()),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
        }
    )
    if profile_out is not None:
        env["ENGRAM_BENCH_PROFILE_OUT"] = str(profile_out)
        cmd = [sys.executable, str(BENCH / "search_profile_server.py")]
    else:
        cmd = [sys.executable, "-m", "app", "serve"]
    log_path = tmp / "server-search.log"
    with open(log_path, "wb") as fh:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    cleanup.servers.append(proc)
    return proc, log_path


# Server-side hooks (bench/search_profile_server.py), per request: embed and text run side by
# side (the text statement starts before the embedding), then vector and pipeline one after
# the other (encode runs inside embed, untagged).
HOOKS = ("embed", "text", "vector", "pipeline")


def server_split(path: Path, windows: list[tuple[float, float]]) -> dict[str, Any]:
    """Per class, medians of the server-side parts of each sequential request: the hooks'
    durations; text_wait, how long the request still waited for the text statement after
    its vector was ready (the end of text less the end of embed, at least 0); and rest =
    request - the critical path (the span from the first start to the last end of embed
    and text, then vector and pipeline)."""
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    hooks = sorted((r for r in records if r[0] != "request"), key=lambda r: r[2])
    starts = [r[2] for r in hooks]
    out: dict[str, Any] = {}
    keys = ("request", *HOOKS, "text_wait", "rest")
    for cls in CLASSES:
        parts: dict[str, list[float]] = {k: [] for k in keys}
        for kind, tag, wall, dur in records:
            if kind != "request" or tag != cls:
                continue
            got = dict.fromkeys(HOOKS, 0.0)
            # (start, end) of embed and of text, wall clock in seconds.
            spans: dict[str, list[tuple[float, float]]] = {"embed": [], "text": []}
            lo = bisect.bisect_left(starts, wall)
            hi = bisect.bisect_right(starts, wall + dur)
            for h in hooks[lo:hi]:
                if h[0] in got and h[1] == cls:
                    got[h[0]] += h[3]
                    if h[0] in spans:
                        spans[h[0]].append((h[2], h[2] + h[3]))
            both = spans["embed"] + spans["text"]
            overlap = max(e for _, e in both) - min(b for b, _ in both) if both else 0.0
            text_wait = (
                max(0.0, max(e for _, e in spans["text"]) - max(e for _, e in spans["embed"]))
                if spans["embed"] and spans["text"]
                else 0.0
            )
            parts["request"].append(dur * 1000)
            for k, v in got.items():
                parts[k].append(v * 1000)
            parts["text_wait"].append(text_wait * 1000)
            parts["rest"].append((dur - overlap - got["vector"] - got["pipeline"]) * 1000)
        out[cls] = {k: pct(v, 50) for k, v in parts.items()}
        for k in ("request", "text", "text_wait", "vector"):
            out[cls][f"{k}_p95"] = pct(parts[k], 95)
    enc = [
        r[3] * 1000 for r in hooks if r[0] == "encode" and any(a <= r[2] <= b for a, b in windows)
    ]
    out["encode"] = {"n": len(enc), "p50": pct(enc, 50), "p95": pct(enc, 95)}
    return out


# --------------------------------------------------------------------------- report


def summarize_plans(plans: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians (and maxima) over the sampled queries of one class: the text statement's
    per-CTE own times, grouped (small; stats = terms..rare_terms; matched; score =
    postings..txt) and its execution; the vector statement's `vec` own time, fetch (the
    rest of it: the text list unnested and the final select reading the rows of both
    lists) and its execution."""

    def parts(p: dict[str, Any]) -> dict[str, float]:
        t, v = p["text"], p["vector"]

        def own(statement: dict[str, Any], name: str) -> float:
            return float(statement["ctes"].get(name, {}).get("ms", 0.0))

        return {
            "small": own(t, "small"),
            "stats": sum(own(t, n) for n in STATS_CTES),
            "matched": own(t, "matched"),
            "score": sum(own(t, n) for n in SCORE_CTES),
            "text exec": t["execution_ms"],
            "vec": own(v, "vec"),
            "fetch": max(0.0, v["execution_ms"] - own(v, "vec")),
            "vector exec": v["execution_ms"],
        }

    each = [parts(p) for p in plans]
    names = list(each[0]) if each else []
    return {
        "median_ms": {n: statistics.median(e[n] for e in each) for n in names},
        "max_ms": {n: max(e[n] for e in each) for n in names},
        "vec_paths": sorted({p["vector"]["vec_path"] for p in plans}),
        "text_paths": sorted({p["text"]["text_path"] for p in plans}),
        "plan_kinds": "+".join(
            sorted(
                {
                    "generic" if p[st]["generic"] else f"{st} custom"
                    for p in plans
                    for st in STATEMENTS
                }
            )
        ),
        "matched_rows_median": statistics.median(
            p["text"]["ctes"].get("matched", {}).get("rows", 0) for p in plans
        ),
        "text_hits_median": statistics.median(p["text_hits"] for p in plans),
    }


def report(res: dict[str, Any]) -> str:
    out: list[str] = []
    env = res["env"]
    out.append(
        f"Engram search benchmark -- {env['postgres']}, pgvector {env['pgvector']}, "
        f"{env['cpus']} cores, load average {env['loadavg_start']} at start / "
        f"{env.get('loadavg_end', '?')} at end; total {res.get('total_s', 0):.0f} s"
    )
    out.append(f"command: {res['command']}")
    out.append(
        f"base sentences embedded with MiniLM: {res['base_sentences']} in "
        f"{res['embed_base_s']:.1f} s ({res['base_source']})"
    )
    out.append("")
    out.append("Seed")
    rows = []
    for s in res["sizes"]:
        sd = s["seed"]
        lay = sd["layout"]
        rows.append(
            [
                f"{sd['rows']:,}",
                f"{lay['users']:,}",
                "/".join(f"{x:,}" for x in lay["large"]),
                f"{lay['mid_users']} ({lay['mid_rows']:,})",
                f"{lay['small_users']} x {lay['small_rows_min_max'][0]}-"
                f"{lay['small_rows_min_max'][1]}",
                f"{sd['real_vectors']:,} ({100 * sd['real_vectors'] / sd['rows']:.0f}%)",
                f"{sd['copy_s']:.1f}",
                f"{sd['index_build_s']:.1f} ({sd['hnsw_build_s']:.1f})",
                f"{sd['heap']} / {sd['hnsw']} / {sd['gin']}",
            ]
        )
    out.append(
        table(
            [
                "rows",
                "users",
                "large users",
                "mid users (rows)",
                "small users",
                "real MiniLM vectors",
                "COPY s",
                "indexes s (HNSW)",
                "heap / HNSW / GIN",
            ],
            rows,
        )
    )
    for s in res["sizes"]:
        ct = s["seed"]["common_terms"]
        out.append(
            f"  {s['seed']['rows']:,}: most common lexemes (rows): "
            + ", ".join(f"{k} {v:,}" for k, v in list(ct.items())[:6])
        )
    out.append("")

    out.append("Floors (same run, service idle; sequential)")
    rows = []
    for s in res["sizes"]:
        m = s["measure"]
        floor = m["embed"]["p50"] + m["hnsw"]["p50"]
        rows.append(
            [
                f"{s['seed']['rows']:,}",
                f"{m['embed']['p50']:.2f} / {m['embed']['p95']:.2f}",
                f"{m['embed_reference']['p50']:.2f} / {m['embed_reference']['p95']:.2f}",
                f"{m['hnsw']['p50']:.2f} / {m['hnsw']['p95']:.2f}",
                f"{m['hnsw_large_user']['p50']:.2f} / {m['hnsw_large_user']['p95']:.2f} "
                f"({m['hnsw_large_user_path']})",
                f"{floor:.2f}",
            ]
        )
    out.append(
        table(
            [
                "rows",
                f"embed 1 query p50/p95 ms ({res['embedder_runtime']}, 1 thread)",
                "reference: sentence-transformers p50/p95 ms",
                "HNSW top-10 p50/p95 ms",
                "HNSW top-10 large user p50/p95 ms",
                "floor = embed + HNSW p50 ms",
            ],
            rows,
        )
    )
    out.append("")

    out.append("POST /v1/search, sequential (1 client), and where the time goes (p50s)")
    rows = []
    for s in res["sizes"]:
        m = s["measure"]
        floor = m["embed"]["p50"] + m["hnsw"]["p50"]
        for c in CLASSES:
            h, q = m["http"][c], m["sql"][c]
            lean = m["http_lean"][c]
            ps = summarize_plans(m["plans"][c])
            critical = max(m["embed"]["p50"], q["text"]["p50"]) + q["vector"]["p50"]
            rows.append(
                [
                    f"{s['seed']['rows']:,}",
                    c.replace("_", " "),
                    f"{h['p50']:.1f}",
                    f"{h['p95']:.1f}",
                    f"{lean['p50']:.1f} / {lean['p95']:.1f}",
                    *(f"{q[k]['p50']:.1f} / {q[k]['p95']:.1f}" for k in SQL_PARTS),
                    f"{ps['median_ms']['text exec']:.1f} / {ps['median_ms']['vector exec']:.1f}",
                    f"{h['p50'] - critical:.1f}",
                    f"{h['p50'] / floor:.2f}x / {lean['p50'] / floor:.2f}x",
                    f"{h['empty']}/{h['n']}",
                ]
            )
    out.append(
        table(
            [
                "rows",
                "scope",
                "HTTP p50",
                "HTTP p95",
                "lean client p50/p95",
                "text SQL p50/p95",
                "vector SQL p50/p95",
                "text + vector p50/p95",
                "exec text / vector (auto_explain)",
                "HTTP - max(embed, text SQL) - vector SQL",
                "p50 / floor (httpx / lean)",
                "empty",
            ],
            rows,
        )
    )
    out.append(
        "  ms. HTTP = through httpx (as every earlier run); lean client = the same requests, "
        "interleaved, through LeanHttp (a keep-alive socket, ~1.5 ms less client Python)."
    )
    out.append(
        "  text SQL = SearchRepository.text_matches, vector SQL = SearchRepository."
        "candidates (building the rows), each one round trip on a SearchReader pool"
    )
    out.append(
        "  (the service's), timed from the bench one after the other, no embedding; text + "
        "vector = their sum per query. exec = median executor time of each statement"
    )
    out.append(
        "  from auto_explain (timing overhead included, no round trip). The service starts "
        "the text statement, embeds the query meanwhile, waits for both, then runs"
    )
    out.append(
        "  the vector statement, so a request costs ~max(embed, text SQL) + vector SQL + "
        "rest; HTTP - max(embed, text SQL) - vector SQL = HTTP, validation, pipeline,"
    )
    out.append(
        "  JSON, pool, client, and any cost of the overlap (p50s of separate runs, so a "
        "difference of medians; see the server-side split)."
    )
    out.append("")

    if any("server" in s["measure"] for s in res["sizes"]):
        out.append("Server side (--profile), sequential requests, medians in ms")
        rows = []
        for s in res["sizes"]:
            sv = s["measure"].get("server")
            if not sv:
                continue
            for c in CLASSES:
                x = sv[c]
                h = s["measure"]["http"][c]
                rows.append(
                    [
                        f"{s['seed']['rows']:,}",
                        c.replace("_", " "),
                        f"{h['p50']:.1f}",
                        f"{x['request']:.1f} / {x['request_p95']:.1f}",
                        f"{x['embed']:.1f}",
                        f"{sv['encode']['p50']:.1f}",
                        f"{x['text']:.1f} / {x['text_p95']:.1f}",
                        f"{x['text_wait']:.2f} / {x['text_wait_p95']:.2f}",
                        f"{x['vector']:.1f} / {x['vector_p95']:.1f}",
                        f"{x['pipeline']:.2f}",
                        f"{x['rest']:.1f}",
                        f"{h['p50'] - x['request']:.1f}",
                    ]
                )
        out.append(
            table(
                [
                    "rows",
                    "scope",
                    "client p50",
                    "server p50/p95",
                    "embed wait",
                    "model forward",
                    "text SQL p50/p95 (overlaps embed)",
                    "text wait after embed p50/p95",
                    "vector SQL p50/p95",
                    "pipeline",
                    "rest (validation, JSON)",
                    "client - server",
                ],
                rows,
            )
        )
        out.append(
            "  model forward = LocalEmbedder._encode over all sequential requests; "
            "embed wait includes it plus the batcher and thread hand-off."
        )
        out.append(
            "  text SQL = SearchRepository.text_matches, started before the embedding and "
            "run while it is computed; text wait after embed = how long the request"
        )
        out.append(
            "  still waited for it once its vector was ready. vector SQL = SearchRepository."
            "candidates (after the embedding). No commit: a search has no session."
        )
        out.append(
            "  rest = request - (first start to last end of embed and text) - vector SQL - "
            "pipeline."
        )
        out.append("")

    out.append(
        "What-if: text + vector SQL p50 / p95 ms (text p50 + vector p50) with other limits, "
        "same queries"
    )
    rows = []
    for s in res["sizes"]:
        for vname, v in s["measure"]["what_if"].items():
            rows.append(
                [
                    f"{s['seed']['rows']:,}",
                    vname,
                    *(
                        f"{v[c]['sum']['p50']:.1f} / {v[c]['sum']['p95']:.1f} "
                        f"({v[c]['text']['p50']:.1f} + {v[c]['vector']['p50']:.1f})"
                        for c in CLASSES
                    ),
                ]
            )
    out.append(table(["rows", "limits", *(c.replace("_", " ") for c in CLASSES)], rows))
    out.append(
        "  text_match_cap bounds the rows a large scope BM25-scores (found through the "
        "rarest terms), so it changes which text matches are found; exact_below 250 moves"
    )
    out.append(
        "  scopes of 250-999 rows from the exact ranking to HNSW (none of the measured "
        "classes is one). Timing only: caps change recall, check it with "
        "bench/retrieval_eval.py."
    )
    out.append("")

    out.append(
        "Candidate statement plans: the plans the service runs (text and vector statements), "
        "from auto_explain (ANALYZE), medians in ms (max in brackets)"
    )
    rows = []
    for s in res["sizes"]:
        m = s["measure"]
        for c in CLASSES:
            ps = summarize_plans(m["plans"][c])
            md, mx = ps["median_ms"], ps["max_ms"]
            rows.append(
                [
                    f"{s['seed']['rows']:,}",
                    c.replace("_", " "),
                    ", ".join(ps["vec_paths"]),
                    ", ".join(ps["text_paths"]),
                    *(f"{md[n]:.2f} ({mx[n]:.1f})" for n in md),
                    f"{ps['matched_rows_median']:,.0f}",
                    f"{ps['text_hits_median']:,.0f}",
                    ps["plan_kinds"],
                    str(len(m["plans"][c])),
                ]
            )
    out.append(
        table(
            [
                "rows",
                "scope",
                "vector path",
                "text match path",
                "small",
                "stats",
                "matched",
                "score",
                "text exec",
                "vec",
                "fetch",
                "vector exec",
                "matched rows",
                "text hits",
                "plan",
                "n",
            ],
            rows,
        )
    )
    out.append(
        "  Own times (a CTE less the CTEs it reads first). Text statement: small = the "
        "scope-size probe, stats = terms, query, tenant_stats, rare_lexemes, rare_terms (term_stats"
    )
    out.append(
        "  lookups, tsqueries), matched = finding the rows holding query terms, score = "
        "postings, collection, idf, bm25 and txt (BM25 and the text top list). Vector"
    )
    out.append(
        "  statement: vec = the exact or HNSW branch that ran, fetch = the rest (the text "
        "list unnested, the final select reading the rows of both lists). exec = each"
    )
    out.append(
        "  statement's executor time. vector path: the vec branch whose Result, gated on "
        "the `small` parameter ($n exact, NOT $n HNSW), produced rows (HNSW only if"
    )
    out.append(
        f"  {HNSW_INDEX} returned rows); text match path: the matched branch that ran "
        "(small/large scope) and its indexes."
    )
    out.append(
        "  text hits = rows with a text rank. plan: generic or custom (a generic plan holds "
        "$n parameters, a custom one their values), for both statements."
    )
    out.append("")

    out.append("Throughput: concurrent clients, mixed unscoped/small/large requests")
    rows = []
    for s in res["sizes"]:
        c = s["measure"]["concurrent"]
        rows.append(
            [
                f"{s['seed']['rows']:,}",
                str(c["clients"]),
                str(c["requests"]),
                f"{c['rps']:.0f}",
                f"{c['p50']:.1f}",
                f"{c['p95']:.1f}",
                f"{c['server_cores']:.2f} / {c['pg_cores']:.2f} / {c['bench_cores']:.2f} / "
                f"{c['other_cores']:.2f}",
            ]
        )
    out.append(
        table(
            [
                "rows",
                "clients",
                "requests",
                "req/s",
                "p50 ms",
                "p95 ms",
                "cores: service / PostgreSQL / bench / other",
            ],
            rows,
        )
    )
    out.append("")

    out.append("Machine load during the sequential rounds (cores busy)")
    rows = []
    for s in res["sizes"]:
        c = s["measure"]["sequential_cpu"]
        rows.append(
            [
                f"{s['seed']['rows']:,}",
                f"{c['server_cpu_s']:.2f}",
                f"{c['pg_cpu_s']:.2f}",
                f"{c['bench_cpu_s']:.2f}",
                f"{c['other_cpu_s']:.2f}",
            ]
        )
    out.append(table(["rows", "service", "PostgreSQL", "bench", "other processes"], rows))
    out.append("")

    if res["args"].get("show_plans"):
        s = res["sizes"][-1]
        for c in CLASSES:
            p0 = s["measure"]["plans"][c][0]
            who = f", user {p0['user_id']}" if p0["user_id"] else ""
            for st in STATEMENTS:
                kind = "generic" if p0[st]["generic"] else "custom"
                out.append(
                    f"auto_explain (ANALYZE, BUFFERS), {kind} plan, {s['seed']['rows']:,} rows, "
                    f"{c}{who}, {st} statement: {p0['query']!r}"
                )
                out.append(s["measure"]["plan_text"][c][st])
                out.append("")

    repeated = [s for s in res["sizes"] if "http_lean_repeated" in s["measure"]]
    if repeated:
        out.append(f"Questions asked again (--query-cache {res['args']['query_cache']}), lean "
                   "client, sequential: the query's vector from the cache")
        rows = []
        for s in repeated:
            m = s["measure"]
            floor = m["embed"]["p50"] + m["hnsw"]["p50"]
            for c in CLASSES:
                again, first = m["http_lean_repeated"][c], m["http_lean"][c]
                rows.append([f"{s['seed']['rows']:,}", c.replace("_", " "),
                             f"{again['p50']:.1f} / {again['p95']:.1f}",
                             f"{first['p50']:.1f} / {first['p95']:.1f}",
                             f"{again['p50'] / floor:.2f}x"])
        out.append(table(["rows", "scope", "asked again p50/p95 ms",
                          "the rounds p50/p95 ms (mixed)", "asked again p50 / floor"], rows))
        for s in repeated:
            out.append(f"  {s['seed']['rows']:,}: query vectors "
                       + ", ".join(f"{k} {v:,.0f}"
                                   for k, v in sorted(s["measure"]["query_vectors"].items())))
        out.append("  With the cache on, a question's requests in the rounds after its first "
                   "are hits too.")
        out.append("")

    out.append("Goal check (p50 <= 1.5 x floor; p95 < 50 ms at 100k)")
    for g in res["goal"]:
        out.append("  " + g)
    return "\n".join(out)


async def query_vector_counts(client: httpx.AsyncClient) -> dict[str, float]:
    """engram_search_query_vectors_total by outcome, from the service's /metrics."""
    text = (await client.get("/metrics")).text
    counts = {}
    for line in text.splitlines():
        if line.startswith("engram_search_query_vectors_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = float(line.rsplit(" ", 1)[1])
    return counts


def goal_lines(res: dict[str, Any]) -> list[str]:
    lines = []
    if res["args"].get("query_cache"):
        lines.append("NOT the goal's measurement: with --query-cache most of the rounds' "
                     "requests took their vector from the cache (run without it)")
    for s in res["sizes"]:
        m = s["measure"]
        n = s["seed"]["rows"]
        floor = m["embed"]["p50"] + m["hnsw"]["p50"]
        reference = m["embed_reference"]["p50"] + m["hnsw"]["p50"]
        for c in CLASSES:
            for client, h in (("httpx", m["http"][c]), ("lean", m["http_lean"][c])):
                ok50 = h["p50"] <= 1.5 * floor
                line = (
                    f"{n:>7,} {c:<10} {client:<5}: p50 {h['p50']:5.1f} ms vs 1.5 x floor "
                    f"{1.5 * floor:5.1f} ms -> {'PASS' if ok50 else 'FAIL'} "
                    f"({h['p50'] / floor:.2f}x; "
                    f"{h['p50'] / reference:.2f}x the sentence-transformers floor)"
                )
                if n >= 100_000:
                    ok95 = h["p95"] < 50
                    line += f"; p95 {h['p95']:5.1f} ms < 50 ms -> {'PASS' if ok95 else 'FAIL'}"
                lines.append(line)
    return lines


# --------------------------------------------------------------------------- main


async def base_embeddings(seed: int, n: int, model: Any = None, threads: int = 2,
                          use_cache: bool = True) -> tuple[list[str], np.ndarray, str]:
    """The corpus's `n` base sentences and their MiniLM vectors, kept in bench/results
    under a digest of the sentences (`model`, or one loaded on `threads`, embeds them when
    there is no cached file); also where the vectors came from."""
    texts = ing.make_sentences(seed, n)
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    cache = BENCH / "results" / f"search-base-{digest}.npy"
    if cache.exists() and use_cache:
        return texts, np.load(cache), f"cached in {cache.name}"
    if model is None:
        model = await asyncio.to_thread(ing.load_model, threads)
    base = await asyncio.to_thread(ing.encode, model, texts)
    if use_cache:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, base)
    return texts, base, f"embedded now, {threads} torch thread(s)"


async def run(args: argparse.Namespace, cleanup: ing.Cleanup, res: dict[str, Any]) -> None:
    from app.models import DEFAULT_TENANT_ID

    url, pm_pid, tmp = await ing.start_database(cleanup, "search", res["env"])

    seed_threads = 2 if os.getloadavg()[0] < 1.0 else 1
    t = time.perf_counter()
    model = await asyncio.to_thread(ing.load_model, seed_threads)
    log(f"MiniLM loaded in {time.perf_counter() - t:.1f} s")
    t = time.perf_counter()
    base_texts, base, res["base_source"] = await base_embeddings(
        args.seed, args.base_sentences, model, seed_threads, use_cache=not args.no_cache)
    res["base_sentences"] = len(base_texts)
    res["embed_base_s"] = time.perf_counter() - t
    log(f"{len(base_texts)} base embeddings: {res['base_source']} ({res['embed_base_s']:.1f} s)")

    # The query side: questions and their vectors (for the SQL-only measurements).
    await asyncio.to_thread(ing.set_threads, 1)  # the service runs the model on one thread
    n_q = args.warmup + args.queries
    questions = make_questions(args.seed + 500, n_q)
    qvecs = await asyncio.to_thread(ing.encode, model, questions)
    # The service's own encoder, for the embedding floor (its ONNX export shared with
    # the service through the cache folder).
    res["embedder_runtime"], encoder = await asyncio.to_thread(ing.load_service_encoder)

    for rows in args.rows:
        log(f"=== {rows:,} rows ===")
        seeded = await seed(args, url, rows, base, base_texts, DEFAULT_TENANT_ID)
        log(
            f"large user {seeded['large_user']} ({seeded['large_user_rows']:,} rows), "
            f"{len(seeded['small_users'])} small users"
        )
        gc.collect()
        measured = await measure_size(
            args, cleanup, url, pm_pid, model, encoder, questions, qvecs, seeded, tmp
        )
        res["sizes"].append({"seed": seeded, "measure": measured})
    res["goal"] = goal_lines(res)


FULL = {
    "rows": "10000,100000",
    "base_sentences": 4000,
    "queries": 300,
    "rounds": 5,
    "warmup": 15,
    "concurrent_requests": 600,
    "explain": 20,
    "what_if": 40,
}
QUICK = {
    "rows": "10000",
    "base_sentences": 1000,
    "queries": 60,
    "rounds": 2,
    "warmup": 6,
    "concurrent_requests": 120,
    "explain": 5,
    "what_if": 10,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="a 2-3 minute smoke run (10k rows)")
    p.add_argument("--rows", help="comma-separated sizes (default 10000,100000)")
    p.add_argument("--base-sentences", type=int, help="sentences embedded with MiniLM")
    p.add_argument("--queries", type=int, help="measured queries per scope class")
    p.add_argument("--rounds", type=int, help="interleaved measurement rounds")
    p.add_argument("--warmup", type=int, help="warm-up queries per class")
    p.add_argument("--concurrent-requests", type=int, help="requests in the throughput run")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (default 8)")
    p.add_argument("--what-if", type=int, help="queries per class for the what-if limits")
    p.add_argument("--explain", type=int, help="auto_explain (ANALYZE) samples per class")
    p.add_argument(
        "--profile",
        action="store_true",
        help="run the service under bench/search_profile_server.py (server-side split: "
        "embed wait, model, text SQL overlapping it, vector SQL, pipeline, rest)",
    )
    p.add_argument(
        "--show-plans",
        action="store_true",
        help="print the candidate statements' generic plans (auto_explain, ANALYZE) of one "
        "query per class (last size)",
    )
    p.add_argument(
        "--query-cache",
        type=int,
        default=0,
        help="the service's ENGRAM_SEARCH_QUERY_CACHE_SIZE (default 0: every request embeds "
        "its query, as a question asked for the first time; the rounds ask each question "
        "six times). With a size, the measured questions are then asked again",
    )
    p.add_argument("--maintenance-work-mem", default="2GB")
    p.add_argument("--seed", type=int, default=20261121)
    p.add_argument("--no-cache", action="store_true", help="re-embed the base sentences")
    p.add_argument(
        "--json",
        default=None,
        help="results path (default bench/results/search-<time>.json; 'none')",
    )
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.rows = [int(x) for x in str(args.rows).split(",") if x.strip()]
    if args.explain < 1:
        # The plan table (and the split of each statement's time) is built from these.
        p.error("--explain must be at least 1")
    if args.explain > args.queries:
        args.explain = args.queries
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return ing.run_main("search", parse_args(argv), argv, run, report, extra={"sizes": []})


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
