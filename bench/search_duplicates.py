"""Identical vectors in other scopes against the filtered HNSW scan.

Memories stored as the same text many times over (one boilerplate memory per user) put
many identical vectors in the one HNSW index every tenant shares. This seeds the corpus of
bench/search.py (one 100k tenant), then gives each of --copies one-row tenants a copy of
every measured question's own vector, and times the vector statement as the service runs
it (SearchRepository, after the full-text statement; no embedding) for a tenant-wide
search, a 10k-row user and a ~5k-row user: before the copies, with them, and after they
were deleted (dead index entries, not yet vacuumed) and written again. It also counts
how many of 20 rows a plain filtered HNSW query returns. A scan that comes back short
makes the service re-rank the scope exactly ("fallbacks").

Run: `HF_HUB_OFFLINE=1 .venv/bin/python bench/search_duplicates.py` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)

import ingest as ing  # noqa: E402  (bench/ingest.py: database and process control)
import search as sb  # noqa: E402  (bench/search.py: its corpus and questions)

HNSW_ROWS = """SELECT count(*) FROM (
    SELECT id FROM memories WHERE archived_at IS NULL AND tenant_id = $2
    ORDER BY embedding <=> $1::halfvec(384) LIMIT 20) t"""


class Counting:
    """The service's reader, counting the statements of each call."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.calls = 0

    async def fetch(self, query: str, *args: Any) -> Any:
        self.calls += 1
        return await self.reader.fetch(query, *args)


async def run(args: argparse.Namespace, cleanup: ing.Cleanup, res: dict[str, Any]) -> None:
    from app.db import create_engine
    from app.models import DEFAULT_TENANT_ID
    from app.models.vector import vector_text
    from app.search.config import build_limits
    from app.search.reader import SearchReader
    from app.search.repository import SearchFilter, SearchRepository
    from app.settings import Settings

    url, _, _ = await ing.start_database(cleanup, "search-duplicates", res["env"])
    sargs = sb.parse_args(["--rows", str(args.rows), "--seed", str(args.seed)])
    base_texts, base, _ = await sb.base_embeddings(sargs.seed, sargs.base_sentences)
    seeded = await sb.seed(sargs, url, args.rows, base, base_texts, DEFAULT_TENANT_ID)

    questions = sb.make_questions(args.seed + 500, args.queries)
    _, encoder = await asyncio.to_thread(ing.load_service_encoder)
    vectors = [v.tolist() for v in encoder.encode(questions)]
    texts = [vector_text(v) for v in vectors]

    conn = await ing.connect(url)
    mid_user = await conn.fetchval(
        "SELECT user_id FROM memories WHERE tenant_id = $1 AND user_id <> $2 GROUP BY user_id"
        " ORDER BY abs(count(*) - 5000) LIMIT 1", DEFAULT_TENANT_ID, seeded["large_user"])
    settings = Settings(database_url=url, _env_file=None)
    limits = build_limits(settings)
    engine = create_engine(settings.async_database_url or url, settings)
    reader = await SearchReader.open(engine, settings)
    counting = Counting(reader)
    repo = SearchRepository(counting, DEFAULT_TENANT_ID)
    scopes = {"tenant-wide": SearchFilter(), "10k-row user": SearchFilter(
        user_id=seeded["large_user"]), "~5k-row user": SearchFilter(user_id=mid_user)}
    await conn.execute("SET hnsw.iterative_scan = relaxed_order; SET hnsw.ef_search = "
                       f"{settings.hnsw_ef_search}")

    async def measure(phase: str) -> None:
        for name, filters in scopes.items():
            times: list[float] = []
            fallbacks = 0
            for question, vector in zip(questions, vectors, strict=True):
                text = await repo.text_matches(question, filters, limits)
                counting.calls = 0
                t = time.perf_counter()
                await repo.candidates(text, vector, filters, limits, 10)
                times.append((time.perf_counter() - t) * 1000)
                fallbacks += counting.calls > 1
            res["rows"].append([phase, name, ing.pct(times, 50), max(times), fallbacks])
        found = [await conn.fetchval(HNSW_ROWS, t, DEFAULT_TENANT_ID) for t in texts]
        res["hnsw"].append([phase, found])
        ing.log(f"{phase}: measured")

    async def copy_vectors() -> None:
        await conn.execute(
            "INSERT INTO tenants (id, name) SELECT gen_random_uuid(), 'copy-' || g"
            " FROM generate_series(1, $1) g", args.copies)
        for t in texts:
            await conn.execute(
                "INSERT INTO memories (tenant_id, id, content, embedding)"
                " SELECT id, gen_random_uuid(), 'a copy', $1::halfvec(384) FROM tenants"
                " WHERE name LIKE 'copy-%'", t)
        await conn.execute("ANALYZE memories")

    res["rows"], res["hnsw"] = [], []
    try:
        await measure("no copies")
        await copy_vectors()
        await measure(f"{args.copies} copies")
        await conn.execute("DELETE FROM tenants WHERE name LIKE 'copy-%'")
        await copy_vectors()
        await measure(f"{args.copies} copies + {args.copies} deleted")
    finally:
        await conn.close()
        await reader.close()
        await engine.dispose()


def report(res: dict[str, Any]) -> str:
    a = res["args"]
    lines = [
        f"Identical vectors in other scopes -- {res['env'].get('postgres')}, pgvector "
        f"{res['env'].get('pgvector')}, {a['rows']:,} memories in one tenant, {a['queries']} "
        f"questions, each with {a['copies']} copies of its vector in other one-row tenants",
        "",
        "| phase | scope | vector SQL p50 ms | max ms | fallbacks to exact |",
        "| --- | --- | --- | --- | --- |",
    ]
    for phase, scope, p50, worst, fallbacks in res["rows"]:
        lines.append(f"| {phase} | {scope} | {p50:.2f} | {worst:.2f} | "
                     f"{fallbacks}/{a['queries']} |")
    lines.append("")
    lines.append("Rows of 20 a plain filtered HNSW query returned (tenant-wide, one per question):")
    for phase, found in res["hnsw"]:
        lines.append(f"  {phase}: {found}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--copies", type=int, default=300)
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--json", default=None,
                        help="results path (default bench/results/search-duplicates-<time>"
                        ".json; 'none')")
    args = parser.parse_args(argv)
    return ing.run_main("search-duplicates", args, argv, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
