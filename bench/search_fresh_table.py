"""Search on a table the planner knows nothing about yet: the first minute after an import.

A throwaway embedded PostgreSQL (migrated to head) and the service on it (`hash`
embedder, auth off: the model is not what is measured). --memories memories are written
through the service across 20 users, and searches (unscoped, and scoped to one user) are
timed at once, before autovacuum has analysed the table, then again after an ANALYZE.
The search statements run with generic plans (app/search/reader.py), planned from
whatever statistics exist; a statement whose plan depends on them is slow here while it
is fast in bench/search.py, which analyses its table before measuring. `reltuples` is
printed at the start and end of each phase (-1: never vacuumed or analysed), since
autovacuum may analyse the table during the first one.

Run: `HF_HUB_OFFLINE=1 .venv/bin/python bench/search_fresh_table.py` (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)

import httpx  # noqa: E402
import ingest as ing  # noqa: E402  (bench/ingest.py: database and process control)
from lean_http import LeanHttp  # noqa: E402

USERS = 20


async def reltuples(url: str) -> float:
    conn = await ing.connect(url)
    try:
        return float(await conn.fetchval(
            "SELECT reltuples FROM pg_class WHERE oid = 'memories'::regclass"))
    finally:
        await conn.close()


async def time_searches(client: LeanHttp, make: Callable[[int], dict[str, Any]], n: int,
                        warmup: int) -> tuple[float, float]:
    times: list[float] = []
    for i in range(warmup + n):
        t = time.perf_counter()
        status, answer = await client.request("POST", "/v1/search", make(i))
        if status != 200:
            raise RuntimeError(f"search -> {status}: {answer[:300]!r}")
        if i >= warmup:
            times.append((time.perf_counter() - t) * 1000)
    return ing.pct(times, 50), ing.pct(times, 95)


async def run(args: argparse.Namespace, cleanup: ing.Cleanup) -> list[str]:
    env: dict[str, Any] = {}
    url, _, tmp = await ing.start_database(cleanup, "fresh-table", env)
    port = ing.free_port()
    proc, log_path = ing.start_server(cleanup, url, "hash", port, tmp, None)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        await ing.wait_ready(proc, http, log_path, 120.0)

    rng = random.Random(args.seed)
    items = [{"content": ing.make_sentence(rng), "user_id": f"user-{i % USERS}"}
             for i in range(args.memories)]
    client = LeanHttp(port)
    await client.write_memories(items)

    def query(i: int) -> str:
        return ing.make_sentence(random.Random(args.seed + i))[:80]

    scopes: dict[str, Callable[[int], dict[str, Any]]] = {
        "unscoped": lambda i: {"query": query(i)},
        "one user": lambda i: {"query": query(i), "user_id": f"user-{i % USERS}"},
    }
    lines = [
        f"Search on a fresh table -- {env['postgres']}, pgvector {env['pgvector']}, "
        f"{args.memories:,} memories, {USERS} users, hash embedder, lean client, "
        f"{args.requests} searches per row",
        "| table | reltuples (start -> end) | scope | p50 ms | p95 ms |",
        "| --- | --- | --- | --- | --- |",
    ]
    for phase in ("not analysed", "analysed"):
        if phase == "analysed":
            conn = await ing.connect(url)
            try:
                await conn.execute("ANALYZE memories")
            finally:
                await conn.close()
        start = await reltuples(url)
        figures = {scope: await time_searches(client, make, args.requests, args.warmup)
                   for scope, make in scopes.items()}
        end = await reltuples(url)
        for scope, (p50, p95) in figures.items():
            lines.append(f"| {phase} | {start:,.0f} -> {end:,.0f} | {scope} | {p50:.2f} | "
                         f"{p95:.2f} |")
    await client.close()
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20261123)
    args = parser.parse_args()
    cleanup = ing.Cleanup()
    try:
        lines = asyncio.run(run(args, cleanup))
    finally:
        cleanup.run()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
