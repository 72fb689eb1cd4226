"""Memory cap benchmark: what `ENGRAM_MAX_MEMORIES_PER_USER` adds to a write.

What it does:

1. Starts a throwaway embedded PostgreSQL (deleted at the end), migrated to head, and two
   services on it (`hash` embedder, auth off: the model is not what is measured): one
   with no cap, one with a cap of --memories per user.
2. Seeds --memories memories for each of two users, `free` and `capped` (through the
   batch endpoint, 500 a request), so `capped` is at its cap.
3. Sends --writes single `POST /v1/memories` requests for each user, alternating:
   `free`'s to the uncapped service, `capped`'s to the capped one, where every write
   archives one of the user's others (the lock, the count, the two eviction statements);
   through bench/lean_http.py (no client library in the figures). Prints p50/p95 of
   each and the difference.
4. Checks: `capped` holds exactly --memories active memories, `free` all it was sent.

To see what the capacity indexes cost a write with no cap, run this file from a
checkout without them (it runs that checkout's service) and compare the `free` column.

Run:   .venv/bin/python bench/capacity.py                  (10k memories a user, ~1 min)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ingest as ing  # noqa: E402  (bench/ingest.py: generator, database and process control)
from lean_http import LeanHttp  # noqa: E402

BATCH = 500


async def run(args: argparse.Namespace, cleanup: ing.Cleanup) -> None:
    url, _, tmp = await ing.start_database(cleanup, "capacity", {})
    texts = ing.make_sentences(args.seed, 2 * (args.memories + args.warmup + args.writes))
    services = {}
    for name, cap in (("free", 0), ("capped", args.memories)):
        port = ing.free_port()
        proc, log_path = ing.start_server(
            cleanup, url, "hash", port, tmp, None, name=name,
            extra_env={"ENGRAM_MAX_MEMORIES_PER_USER": str(cap)})
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await ing.wait_ready(proc, client, log_path, 120.0)
        services[name] = LeanHttp(port)
    t = time.perf_counter()
    for i, user in enumerate(("free", "capped")):
        mine = texts[i * args.memories:(i + 1) * args.memories]
        await services["free"].write_memories(
            [{"content": text, "user_id": user} for text in mine], batch=BATCH)
    conn = await ing.connect(url)
    try:  # so that no autovacuum of the seed runs beside the timed writes
        await conn.execute("VACUUM ANALYZE memories")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()
    ing.log(f"seeded {args.memories} memories for each user in {time.perf_counter() - t:.1f} s")

    fresh = iter(texts[2 * args.memories:])
    lat: dict[str, list[float]] = {"free": [], "capped": []}
    for i in range(args.warmup + args.writes):
        order = ("free", "capped") if i % 2 else ("capped", "free")
        for user in order:
            t = time.perf_counter()
            status, answer = await services[user].request(
                "POST", "/v1/memories", {"content": next(fresh), "user_id": user})
            ms = (time.perf_counter() - t) * 1000
            if status != 201:
                raise SystemExit(f"POST /v1/memories -> {status}: {answer[:300]!r}")
            if i >= args.warmup:
                lat[user].append(ms)

    def pct(xs: list[float], q: int) -> float:
        return statistics.quantiles(xs, n=100)[q - 1]

    for user, xs in lat.items():
        ing.log(f"{user:<7} POST /v1/memories p50 {statistics.median(xs):.2f} ms, "
                f"p95 {pct(xs, 95):.2f} ms ({len(xs)} writes)")
    ing.log(f"the cap adds {statistics.median(lat['capped']) - statistics.median(lat['free']):.2f}"
            " ms p50 to a write that archives one memory")

    conn = await ing.connect(url)
    try:
        counts = dict(await conn.fetch(
            "SELECT user_id, count(*) FROM memories WHERE archived_at IS NULL "
            "GROUP BY user_id"))
    finally:
        await conn.close()
    expected = {"free": args.memories + args.warmup + args.writes, "capped": args.memories}
    ing.log(f"check: active memories {counts}, expected {expected}")
    if counts != expected:
        raise SystemExit("the cap did not hold")
    for client in services.values():
        await client.close()


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--memories", type=int, default=10_000, help="per user (default 10000)")
    p.add_argument("--writes", type=int, default=500, help="timed writes per user")
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--seed", type=int, default=11)
    args = p.parse_args()
    cleanup = ing.Cleanup()
    try:
        asyncio.run(run(args, cleanup))
    finally:
        cleanup.run()


if __name__ == "__main__":
    main()
