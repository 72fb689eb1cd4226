"""Latency of the memory endpoints other than search: get by id, list, patch, create.

A throwaway embedded PostgreSQL (migrated to head) gets --memories memories written
through the service (`hash` embedder, auth off: neither the model nor the key lookup is
what is measured), spread over 20 users, each with a little metadata and a tag, and the
table is analysed. Then one client (bench/lean_http.py: no client library in the
figures) sends, one at a time:
  GET /v1/memories/{id}            one memory by id;
  GET /v1/memories?user_id=&limit=50   a user's newest 50;
  GET /v1/memories?limit=500       the tenant's newest 500 (the largest page);
  PATCH /v1/memories/{id}          a new importance (no embedding);
  POST /v1/memories                one new memory (`hash` embedder).
Prints p50/p95 per request (with --json, the figures as JSON too). For a before/after,
run it from a worktree of each revision.

Run: `HF_HUB_OFFLINE=1 .venv/bin/python bench/reads.py` (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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
Request = Callable[[int], tuple[str, str, Any]]


async def run(args: argparse.Namespace, cleanup: ing.Cleanup) -> dict[str, Any]:
    env: dict[str, Any] = {}
    url, _, tmp = await ing.start_database(cleanup, "reads", env)
    port = ing.free_port()
    proc, log_path = ing.start_server(cleanup, url, "hash", port, tmp, None,
                                      {"ENGRAM_AUTH_ENABLED": "false"})
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        await ing.wait_ready(proc, client, log_path, 120.0)

    rng = random.Random(args.seed)
    items = [{"content": ing.make_sentence(rng), "user_id": f"user-{i % USERS}",
              "tags": [f"topic-{i % 7}"], "metadata": {"turn": i, "speaker": "bench"}}
             for i in range(args.memories)]
    http = LeanHttp(port)
    ids = [m["id"] for m in await http.write_memories(items)]
    # The planner's statistics as autovacuum leaves them a minute later: a table that
    # has none is listed by sorting the whole tenant, not through its created_at index.
    conn = await ing.connect(url)
    try:
        await conn.execute("ANALYZE memories")
    finally:
        await conn.close()

    requests: dict[str, Request] = {
        "GET /v1/memories/{id}": lambda i: ("GET", f"/v1/memories/{ids[i % len(ids)]}", None),
        "GET /v1/memories?user_id&limit=50": lambda i: (
            "GET", f"/v1/memories?user_id=user-{i % USERS}&limit=50", None),
        "GET /v1/memories?limit=500": lambda i: ("GET", "/v1/memories?limit=500", None),
        "PATCH /v1/memories/{id} importance": lambda i: (
            "PATCH", f"/v1/memories/{ids[i % len(ids)]}", {"importance": (i % 10) / 10}),
        "POST /v1/memories": lambda i: (
            "POST", "/v1/memories", {"content": ing.make_sentence(random.Random(i)),
                                     "user_id": f"user-{i % USERS}"}),
    }
    times: dict[str, list[float]] = {r: [] for r in requests}
    for what, make in requests.items():
        for i in range(args.warmup + args.requests):
            method, path, body = make(i)
            t = time.perf_counter()
            status, answer = await http.request(method, path, body)
            ms = (time.perf_counter() - t) * 1000
            if status not in (200, 201):
                raise RuntimeError(f"{method} {path} -> {status}: {answer[:300]!r}")
            if i >= args.warmup:
                times[what].append(ms)
    await http.close()
    return {"env": env, "memories": args.memories, "requests": args.requests,
            "loadavg": os.getloadavg()[0],
            "results": {what: {"p50": ing.pct(xs, 50), "p95": ing.pct(xs, 95)}
                        for what, xs in times.items()}}


def report(out: dict[str, Any]) -> str:
    lines = [
        f"Engram memory endpoints -- {out['env'].get('postgres', '')}, {out['memories']:,} "
        f"memories, {out['requests']} requests per row, load average {out['loadavg']:.2f}",
        "| request | p50 ms | p95 ms |",
        "| --- | --- | --- |",
    ]
    for what, r in out["results"].items():
        lines.append(f"| {what} | {r['p50']:.2f} | {r['p95']:.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=5000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--seed", type=int, default=20261124)
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    cleanup = ing.Cleanup()
    try:
        out = asyncio.run(run(args, cleanup))
    finally:
        cleanup.run()
    print(report(out))
    if args.json:
        print(json.dumps(out["results"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
