"""Search speed benchmark: POST /v1/search through the real HTTP server at 10k and 100k rows.

What it does, for each size in --rows (default 10000,100000; about 8-12 minutes in all
on 2 shared cores):

1. Seeds `memories` of a throwaway embedded PostgreSQL (one server for the whole run,
   deleted at the end; migrated to head; the table is emptied between sizes) with N rows
   for the default tenant, loaded the way bench/ingest.py does it: the secondary indexes
   (HNSW, GIN, btrees) are read from pg_indexes and dropped, the rows are COPYed in binary,
   the indexes are recreated from the saved definitions (HNSW last, checked identical to
   the migration's afterwards), then VACUUM ANALYZE and pg_prewarm. `tsv` is not written
   by the COPY: the row-level BEFORE INSERT trigger of migration 0003 fills it (row
   triggers fire on COPY; the column is NOT NULL and the benchmark also checks that every
   row got a tsv with the date lexemes).

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

2. Runs the service (`python -m app serve`, ENGRAM_EMBEDDER=local, auth off) against that
   database and, in --rounds interleaved rounds (so a change of load on the shared machine
   hits every figure alike), measures sequentially with httpx:
     HTTP  POST /v1/search latency for unscoped-tenant queries, for queries scoped to a
           small user (a different 50-100-row user each time) and to the largest user;
     E     the floor: one query embedding alone (sentence-transformers in this process,
           torch.set_num_threads(1) as the service runs it);
     H     the floor: one HNSW top-10 query alone (asyncpg, same database, ef_search as the
           service's setting), plus the same for the large user with iterative scan;
     SQL   the app's candidate SQL alone, per class, through
           app.search.repository.SearchRepository on the app's own engine (same connection
           settings as the service), and the same SQL without building Memory models.
   A what-if times the same candidate SQL with lower df/corpus caps and a lower
   exact_below (timing only; the caps change BM25's statistics).
   Then requests/s with 8 concurrent clients (httpx.AsyncClient, a bounded number of mixed
   requests), and EXPLAIN (ANALYZE, BUFFERS) of the candidate SQL for a sample of queries
   of each class: which vector path ran (exact over the user btree, or HNSW), and the time
   of each CTE (the text half is `txt`, which includes terms/corpus/idf/matched).

3. Prints the tables (seed, floors, latency and its split, throughput, plans, goal check:
   p50 within 1.5x of embedding + HNSW floor, p95 under 50 ms at 100k) and writes JSON to
   bench/results/ (git-ignored).

With --profile the service runs under bench/search_profile_server.py (the same `serve`
code path with timing hooks) and a server-side split is added: embed wait, model forward,
candidate SQL, pipeline, commit and the rest (validation, session, serialisation).

Run:   .venv/bin/python bench/search.py                 (10k then 100k rows)
       .venv/bin/python bench/search.py --quick         (10k rows, fewer queries, ~2-3 min)
       .venv/bin/python bench/search.py --rows 100000   (one size)
       add --profile for the server-side split, --show-plans for full EXPLAIN ANALYZE output
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
import platform
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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

DIM = ing.DIM
HNSW_INDEX = ing.HNSW_INDEX
CLASSES = ("unscoped", "small_user", "large_user")
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
        await conn.execute("TRUNCATE memories")
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
        out["vacuum_analyze_s"] = time.perf_counter() - t
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        blocks = await conn.fetchval(
            """SELECT sum(pg_prewarm(c.oid)) FROM pg_class c
               WHERE c.oid = 'memories'::regclass OR c.oid IN
                 (SELECT indexrelid FROM pg_index WHERE indrelid = 'memories'::regclass)"""
        )
        sz = await conn.fetchrow(
            f"""SELECT pg_size_pretty(pg_table_size('memories')) AS heap,
                       pg_size_pretty(pg_relation_size('{HNSW_INDEX}')) AS hnsw,
                       pg_size_pretty(pg_relation_size('ix_memories_tsv')) AS gin,
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
    return out


# --------------------------------------------------------------------------- measuring


class _Capture:
    """Stands in for the AsyncSession to capture the exact SQL and parameters."""

    def __init__(self) -> None:
        self.sql = ""
        self.params: dict[str, Any] = {}

    async def execute(self, stmt: Any, params: dict[str, Any] | None = None) -> Any:
        self.sql = str(stmt)
        self.params = dict(params or {})
        return types.SimpleNamespace(mappings=lambda: [])


def cte_times(plan: dict[str, Any]) -> dict[str, Any]:
    """Inclusive time and rows of each CTE of an EXPLAIN (ANALYZE, FORMAT JSON) plan, and
    which vector path ran (the indexes the executed part of the `vec` CTE read)."""
    ctes: dict[str, dict[str, float]] = {}
    vec_indexes: list[str] = []
    vec_sorted_by_distance = False

    def walk(node: dict[str, Any], in_vec: bool) -> None:
        nonlocal vec_sorted_by_distance
        name = node.get("Subplan Name", "")
        if name.startswith("CTE "):
            loops = max(1, node.get("Actual Loops", 0))
            ctes[name[4:]] = {
                "ms": node.get("Actual Total Time", 0.0),
                "rows": node.get("Actual Rows", 0) * loops,
            }
            in_vec = name == "CTE vec"
        if in_vec and node.get("Actual Loops", 0) > 0:
            if node.get("Index Name") and node.get("Actual Rows", 0) > 0:
                vec_indexes.append(node["Index Name"])
            if node.get("Node Type") == "Sort" and any(
                "<=>" in k for k in node.get("Sort Key", [])
            ):
                vec_sorted_by_distance = True
        for child in node.get("Plans", []):
            walk(child, in_vec)

    walk(plan["Plan"], False)
    if HNSW_INDEX in vec_indexes:
        path = "HNSW"
    elif vec_indexes or vec_sorted_by_distance:
        path = "exact: " + "+".join(sorted(set(vec_indexes)) or ["seq scan"]) + " + sort"
    else:
        path = "none ran"
    return {
        "ctes": ctes,
        "vec_path": path,
        "execution_ms": plan.get("Execution Time", 0.0),
        "planning_ms": plan.get("Planning Time", 0.0),
    }


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
    questions: list[str],
    qvecs: np.ndarray,
    seeded: dict[str, Any],
    tmp: Path,
) -> dict[str, Any]:
    from sqlalchemy import text

    from app.db import create_engine, create_sessionmaker
    from app.models import DEFAULT_TENANT_ID
    from app.search.config import build_limits
    from app.search.repository import SearchFilter, SearchRepository
    from app.settings import Settings

    settings = Settings(database_url=url, _env_file=None)
    limits = build_limits(settings)
    small_users: list[str] = seeded["small_users"]
    large_user: str = seeded["large_user"]
    n_q = len(questions)
    out: dict[str, Any] = {"limits": dataclasses.asdict(limits)}

    port = ing.free_port()
    profile_out = tmp / f"profile-{seeded['rows']}.json" if args.profile else None
    proc, log_path = start_server(cleanup, url, port, tmp, profile_out)
    engine = create_engine(settings.async_database_url or url, settings)
    maker = create_sessionmaker(engine)
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

            async def capture(cls: str, i: int) -> _Capture:
                cap = _Capture()
                repo = SearchRepository(cap, DEFAULT_TENANT_ID)  # type: ignore[arg-type]
                await repo.candidates(questions[i], qvecs[i].tolist(), filt(cls, i), limits)
                return cap

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
                    async with maker() as s:
                        await SearchRepository(s, DEFAULT_TENANT_ID).candidates(
                            questions[i], qvecs[i].tolist(), filt(cls, i), limits
                        )
                ing.encode(model, [questions[i]])

            lat: dict[str, list[float]] = {c: [] for c in CLASSES}
            empty: dict[str, int] = dict.fromkeys(CLASSES, 0)
            sql_repo: dict[str, list[float]] = {c: [] for c in CLASSES}
            sql_raw: dict[str, list[float]] = {c: [] for c in CLASSES}
            emb: list[float] = []
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
                for i in idx:  # classes interleaved query by query
                    for cls in CLASSES:
                        ms, n = await post(
                            body_for(cls, questions[i], i, small_users, large_user), cls
                        )
                        lat[cls].append(ms)
                        empty[cls] += n == 0
                seq_windows.append((w0, time.time()))
                for i in idx:
                    t = time.perf_counter()
                    ing.encode(model, [questions[i]])
                    emb.append((time.perf_counter() - t) * 1000)
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
                        async with maker() as s:
                            repo = SearchRepository(s, DEFAULT_TENANT_ID)
                            t = time.perf_counter()
                            await repo.candidates(
                                questions[i], qvecs[i].tolist(), filt(cls, i), limits
                            )
                            sql_repo[cls].append((time.perf_counter() - t) * 1000)
                        cap = await capture(cls, i)
                        async with maker() as s:
                            t = time.perf_counter()
                            (await s.execute(text(cap.sql), cap.params)).fetchall()
                            sql_raw[cls].append((time.perf_counter() - t) * 1000)
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
            out["sql_repo"] = {c: stats(sql_repo[c]) for c in CLASSES}
            out["sql_raw"] = {c: stats(sql_raw[c]) for c in CLASSES}
            out["embed"] = stats(emb)
            out["hnsw"] = stats(hnsw)
            out["hnsw_large_user"] = stats(hnsw_large)
            wall = sum(d["wall_s"] for d in cpu)
            out["sequential_cpu"] = {
                k: sum(d[k] for d in cpu) / wall for k in cpu[0] if k != "wall_s"
            }

            # What-if: the same candidate SQL with other caps (not the service's settings),
            # to size what the text half's statistics and the small-scope probe cost.
            variants = {
                "service settings": limits,
                "df_cap 1000, corpus_cap 10000": dataclasses.replace(
                    limits, df_cap=1000, corpus_cap=10_000
                ),
                "... and exact_below 250": dataclasses.replace(
                    limits, df_cap=1000, corpus_cap=10_000, exact_below=250
                ),
            }
            what_if: dict[str, dict[str, Any]] = {v: {c: [] for c in CLASSES} for v in variants}
            for i in order[: args.what_if]:
                for cls in CLASSES:
                    for vname, lim in variants.items():
                        async with maker() as s:
                            repo = SearchRepository(s, DEFAULT_TENANT_ID)
                            t = time.perf_counter()
                            await repo.candidates(
                                questions[i], qvecs[i].tolist(), filt(cls, i), lim
                            )
                            what_if[vname][cls].append((time.perf_counter() - t) * 1000)
            out["what_if"] = {
                v: {
                    "limits": dataclasses.asdict(variants[v]),
                    **{c: stats(what_if[v][c]) for c in CLASSES},
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

            # Plans: EXPLAIN ANALYZE of the app's SQL on the app's engine (same settings).
            plans: dict[str, list[dict[str, Any]]] = {c: [] for c in CLASSES}
            texts: dict[str, str] = {}
            async with maker() as s:
                for setting in ("hnsw.ef_search", "hnsw.iterative_scan", "plan_cache_mode"):
                    out.setdefault("session_settings", {})[setting] = (
                        await s.execute(text(f"SHOW {setting}"))
                    ).scalar()
            for k in range(args.explain):
                i = args.warmup + k
                for cls in CLASSES:
                    cap = await capture(cls, i)
                    async with maker() as s:
                        res = (
                            await s.execute(
                                text("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + cap.sql),
                                cap.params,
                            )
                        ).scalar()
                        doc = res if isinstance(res, list) else json.loads(str(res))
                        info = cte_times(doc[0])
                        info["query"] = questions[i]
                        info["user_id"] = cap.params.get("user_id")
                        plans[cls].append(info)
                        if k == 0:
                            texts[cls] = "\n".join(
                                r[0]
                                for r in (
                                    await s.execute(
                                        text("EXPLAIN (ANALYZE, BUFFERS) " + cap.sql), cap.params
                                    )
                                ).fetchall()
                            )
            out["plans"] = plans
            out["plan_text"] = texts
    finally:
        await raw.close()
        await engine.dispose()
        await asyncio.to_thread(cleanup.stop_server, proc)
    if profile_out is not None:
        out["server"] = server_split(profile_out, seq_windows)
    return out


def start_server(
    cleanup: ing.Cleanup, url: str, port: int, tmp: Path, profile_out: Path | None
) -> tuple[subprocess.Popen[bytes], Path]:
    """`python -m app serve` (or, with --profile, the same under search_profile_server.py)."""
    env = dict(os.environ)
    env.update(
        {
            "ENGRAM_DATABASE_URL": url,
            "ENGRAM_PORT": str(port),
            "ENGRAM_HOST": "127.0.0.1",
            "ENGRAM_EMBEDDER": "local",
            "ENGRAM_AUTH_ENABLED": "false",
            "ENGRAM_DATA_DIR": str(tmp / "engram-data"),
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


def server_split(path: Path, windows: list[tuple[float, float]]) -> dict[str, Any]:
    """Per class, medians of the server-side parts of each sequential request."""
    try:
        records = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    hooks = sorted((r for r in records if r[0] != "request"), key=lambda r: r[2])
    starts = [r[2] for r in hooks]
    out: dict[str, Any] = {}
    for cls in CLASSES:
        parts: dict[str, list[float]] = {
            k: [] for k in ("request", "embed", "candidates", "pipeline", "commit", "rest")
        }
        for kind, tag, wall, dur in records:
            if kind != "request" or tag != cls:
                continue
            got = dict.fromkeys(("embed", "candidates", "pipeline", "commit"), 0.0)
            lo = bisect.bisect_left(starts, wall)
            hi = bisect.bisect_right(starts, wall + dur)
            for h in hooks[lo:hi]:
                if h[0] in got and h[1] == cls:
                    got[h[0]] += h[3]
            parts["request"].append(dur * 1000)
            for k, v in got.items():
                parts[k].append(v * 1000)
            parts["rest"].append((dur - sum(got.values())) * 1000)
        out[cls] = {k: pct(v, 50) for k, v in parts.items()}
        out[cls]["request_p95"] = pct(parts["request"], 95)
    enc = [
        r[3] * 1000 for r in hooks if r[0] == "encode" and any(a <= r[2] <= b for a, b in windows)
    ]
    out["encode"] = {"n": len(enc), "p50": pct(enc, 50), "p95": pct(enc, 95)}
    return out


# --------------------------------------------------------------------------- report


def summarize_plans(plans: list[dict[str, Any]]) -> dict[str, Any]:
    names = ["small", "vec", "terms", "corpus", "idf", "matched", "txt"]
    med = {
        n: statistics.median([p["ctes"].get(n, {}).get("ms", 0.0) for p in plans]) for n in names
    }
    mx = {n: max(p["ctes"].get(n, {}).get("ms", 0.0) for p in plans) for n in names}
    paths = sorted({p["vec_path"] for p in plans})
    return {
        "median_ms": med,
        "max_ms": mx,
        "vec_paths": paths,
        "execution_ms": statistics.median(p["execution_ms"] for p in plans),
        "planning_ms": statistics.median(p["planning_ms"] for p in plans),
        "matched_rows_median": statistics.median(
            p["ctes"].get("matched", {}).get("rows", 0) for p in plans
        ),
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
                "embed 1 query p50/p95 ms (1 thread)",
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
            h = m["http"][c]
            sr = m["sql_repo"][c]
            sw = m["sql_raw"][c]
            ps = summarize_plans(m["plans"][c])
            rest = h["p50"] - m["embed"]["p50"] - sr["p50"]
            rows.append(
                [
                    f"{s['seed']['rows']:,}",
                    c.replace("_", " "),
                    f"{h['p50']:.1f}",
                    f"{h['p95']:.1f}",
                    f"{sr['p50']:.1f} / {sr['p95']:.1f}",
                    f"{sw['p50']:.1f}",
                    f"{ps['planning_ms']:.1f} + {ps['execution_ms']:.1f}",
                    f"{ps['median_ms']['vec']:.1f}",
                    f"{ps['median_ms']['txt']:.1f}",
                    f"{rest:.1f}",
                    f"{h['p50'] / floor:.2f}x",
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
                "cand. SQL (repo) p50/p95",
                "SQL only p50",
                "EXPLAIN plan+exec",
                "vec CTE",
                "text CTE",
                "HTTP - embed - repo",
                "p50 / floor",
                "empty",
            ],
            rows,
        )
    )
    out.append(
        "  ms. cand. SQL (repo) = SearchRepository.candidates on the app's engine (SQL + "
        "Memory models); SQL only = same statement, rows fetched, no models;"
    )
    out.append(
        "  EXPLAIN = median of EXPLAIN ANALYZE over the sampled queries (timing "
        "overhead included); HTTP - embed - repo = HTTP, validation, pipeline, JSON, "
        "pool, client."
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
                        f"{x['candidates']:.1f}",
                        f"{x['pipeline']:.2f}",
                        f"{x['commit']:.2f}",
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
                    "candidates",
                    "pipeline",
                    "commit",
                    "rest (validation, session, JSON)",
                    "client - server",
                ],
                rows,
            )
        )
        out.append(
            "  model forward = LocalEmbedder._encode over all sequential requests; "
            "embed wait includes it plus the batcher and thread hand-off."
        )
        out.append("")

    out.append("What-if: candidate SQL (repo) p50 / p95 ms with other caps, same queries")
    rows = []
    for s in res["sizes"]:
        for vname, v in s["measure"]["what_if"].items():
            rows.append(
                [
                    f"{s['seed']['rows']:,}",
                    vname,
                    *(f"{v[c]['p50']:.1f} / {v[c]['p95']:.1f}" for c in CLASSES),
                ]
            )
    out.append(table(["rows", "limits", *(c.replace("_", " ") for c in CLASSES)], rows))
    out.append(
        "  caps change BM25's N and df (quality); exact_below moves scopes of 250-999 "
        "rows to the HNSW path. Timing only: check recall with bench/retrieval_eval.py."
    )
    out.append("")

    out.append("Candidate SQL plans: EXPLAIN (ANALYZE) medians per CTE, ms (max in brackets)")
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
                    *(
                        f"{md[n]:.2f} ({mx[n]:.1f})"
                        for n in ("small", "vec", "corpus", "idf", "matched", "txt")
                    ),
                    f"{ps['matched_rows_median']:,.0f}",
                    str(len(m["plans"][c])),
                ]
            )
    out.append(
        table(
            [
                "rows",
                "scope",
                "vector path",
                "small",
                "vec",
                "corpus",
                "idf",
                "matched",
                "txt (text half)",
                "matched rows",
                "n",
            ],
            rows,
        )
    )
    out.append(
        "  txt includes terms/corpus/idf/matched (CTEs run when first read); vec "
        "includes the exact or HNSW branch that ran."
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
            out.append(
                f"EXPLAIN (ANALYZE, BUFFERS) at {s['seed']['rows']:,} rows, {c}: "
                f"{s['measure']['plans'][c][0]['query']!r}"
            )
            out.append(s["measure"]["plan_text"][c])
            out.append("")

    out.append("Goal check (p50 <= 1.5 x floor; p95 < 50 ms at 100k)")
    for g in res["goal"]:
        out.append("  " + g)
    return "\n".join(out)


def goal_lines(res: dict[str, Any]) -> list[str]:
    lines = []
    for s in res["sizes"]:
        m = s["measure"]
        n = s["seed"]["rows"]
        floor = m["embed"]["p50"] + m["hnsw"]["p50"]
        for c in CLASSES:
            h = m["http"][c]
            ok50 = h["p50"] <= 1.5 * floor
            line = (
                f"{n:>7,} {c:<10}: p50 {h['p50']:5.1f} ms vs 1.5 x floor {1.5 * floor:5.1f}"
                f" ms -> {'PASS' if ok50 else 'FAIL'} ({h['p50'] / floor:.2f}x)"
            )
            if n >= 100_000:
                ok95 = h["p95"] < 50
                line += f"; p95 {h['p95']:5.1f} ms < 50 ms -> {'PASS' if ok95 else 'FAIL'}"
            lines.append(line)
    return lines


# --------------------------------------------------------------------------- main


async def run(args: argparse.Namespace, cleanup: ing.Cleanup, res: dict[str, Any]) -> None:
    from app.db import create_engine
    from app.embedded_db import start_embedded
    from app.migrate import upgrade_to_head
    from app.models import DEFAULT_TENANT_ID
    from app.settings import Settings

    tmp = Path(tempfile.mkdtemp(prefix="engram-bench-search-"))
    cleanup.tmp = tmp
    t = time.perf_counter()
    pg = await asyncio.to_thread(start_embedded, tmp, cleanup_mode="delete")
    cleanup.pg = pg
    url = pg.url
    pm_pid = pg.server.get_pid()
    log(f"embedded PostgreSQL up in {time.perf_counter() - t:.1f} s")
    engine = create_engine(url, Settings(database_url=url, _env_file=None))
    try:
        await upgrade_to_head(engine)
    finally:
        await engine.dispose()
    conn = await ing.connect(url)
    try:
        env = res["env"]
        env["postgres"] = (await conn.fetchval("SELECT version()")).split(" on ")[0]
        env["pgvector"] = await conn.fetchval(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        )
        env["shared_buffers"] = await conn.fetchval("SHOW shared_buffers")
    finally:
        await conn.close()
    log(
        f"migrated: {env['postgres']}, pgvector {env['pgvector']}, "
        f"shared_buffers {env['shared_buffers']}"
    )

    seed_threads = 2 if os.getloadavg()[0] < 1.0 else 1
    t = time.perf_counter()
    model = await asyncio.to_thread(ing.load_model, seed_threads)
    log(f"MiniLM loaded in {time.perf_counter() - t:.1f} s")
    base_texts = ing.make_sentences(args.seed, args.base_sentences)
    digest = hashlib.sha256("\n".join(base_texts).encode()).hexdigest()[:16]
    cache = BENCH / "results" / f"search-base-{digest}.npy"
    t = time.perf_counter()
    if cache.exists() and not args.no_cache:
        base = np.load(cache)
        res["base_source"] = f"cached in {cache.name}"
    else:
        base = await asyncio.to_thread(ing.encode, model, base_texts)
        res["base_source"] = f"embedded now, {seed_threads} torch thread(s)"
        if not args.no_cache:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.save(cache, base)
    res["base_sentences"] = len(base_texts)
    res["embed_base_s"] = time.perf_counter() - t
    log(f"{len(base_texts)} base embeddings: {res['base_source']} ({res['embed_base_s']:.1f} s)")

    # The query side: questions and their vectors (for the SQL-only measurements).
    await asyncio.to_thread(ing.set_threads, 1)  # the service runs the model on one thread
    n_q = args.warmup + args.queries
    questions = make_questions(args.seed + 500, n_q)
    qvecs = await asyncio.to_thread(ing.encode, model, questions)

    for rows in args.rows:
        log(f"=== {rows:,} rows ===")
        seeded = await seed(args, url, rows, base, base_texts, DEFAULT_TENANT_ID)
        log(
            f"large user {seeded['large_user']} ({seeded['large_user_rows']:,} rows), "
            f"{len(seeded['small_users'])} small users"
        )
        gc.collect()
        measured = await measure_size(
            args, cleanup, url, pm_pid, model, questions, qvecs, seeded, tmp
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
    p.add_argument("--what-if", type=int, help="queries per class for the what-if caps")
    p.add_argument("--explain", type=int, help="EXPLAIN ANALYZE samples per class")
    p.add_argument(
        "--profile",
        action="store_true",
        help="run the service under bench/search_profile_server.py (server-side split: "
        "embed wait, model, candidate SQL, pipeline, commit, rest)",
    )
    p.add_argument(
        "--show-plans",
        action="store_true",
        help="print the full EXPLAIN ANALYZE of one query per class (last size)",
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
    if args.explain > args.queries:
        args.explain = args.queries
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else str(argv)
    res: dict[str, Any] = {
        "args": vars(args),
        "command": command,
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "env": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        },
        "sizes": [],
    }
    cleanup = ing.Cleanup()

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.perf_counter()
    try:
        asyncio.run(run(args, cleanup, res))
    except KeyboardInterrupt:
        log("interrupted; stopping the service and the database")
        return 130
    finally:
        cleanup.run()
    res["total_s"] = time.perf_counter() - t0
    res["env"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print()
    print(report(res))
    if args.json != "none":
        path = (
            Path(args.json)
            if args.json
            else BENCH / "results" / f"search-{time.strftime('%Y%m%d-%H%M%S')}.json"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=2, default=str))
        print(f"\nresults written to {path}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
