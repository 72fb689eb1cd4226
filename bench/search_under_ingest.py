"""Search under ingest: search latency while other clients write memories.

The service embeds search queries and written memories on one model thread
(app/providers/local_embedder.py). Its batcher (app/providers/batcher.py) embeds a write
batch in short passes and serves single texts first, so a search's query waits for at most
one pass of a batch; until 2026-11-24 it handed a write's texts to the model as one call, and
a search arriving behind a batch of 500 waited for all of it (seconds).

This seeds the corpus of bench/search.py (--rows, one tenant, skewed users; its cached MiniLM
base vectors), starts the real server (local model) and measures through it, with the lean
client, sequential POST /v1/search calls (`top_k` 10; its questions, each asked tenant-wide
and for the largest user, a 10-30 ms pause before each) in these phases, one after the other
on the same server and database:

1. alone: searches only;
2. ingest alone: one writer posting batches of --batch new memories (POST /v1/memories/batch,
   sentences of bench/ingest.py from another seed, spread over the small users) for
   --seconds: memories/s and the batch requests' latency;
3. search during ingest: the same writer running continuously while the searches run;
4. 2 and 3 again with batches of --big-batch (0 skips them);
5. search during single writes: --single-writers writers posting one memory at a time
   (POST /v1/memories), back to back;
6. alone again at the end: the writes stay, so this is the baseline at the grown size.

The search client is closed-loop: a search that waited behind a batch ends just as the model
frees, and the next few run fast in the gap before the writer's next batch, so about one search
per batch request waits and the p50 stays near the idle one. The slow searches' count and
their share of the search time (the time a search arriving at a random moment would be likely
to wait) are in the table beside the percentiles.

Run: `HF_HUB_OFFLINE=1 .venv/bin/python bench/search_under_ingest.py` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)

import ingest as ing  # noqa: E402  (bench/ingest.py: database and process control)
import search as sb  # noqa: E402  (bench/search.py: its corpus and questions)
from lean_http import LeanHttp  # noqa: E402

PAUSE_MS = (10.0, 30.0)  # before each search, uniform
SLOW_MS = 100.0  # a search slower than this waited behind a write
TIMEOUT_S = 300.0  # any one request; a hung server fails the run instead of stalling it


@dataclass
class Writes:
    """The writers' finished requests: (start, end, memories), perf_counter seconds."""

    done: list[tuple[float, float, int]] = field(default_factory=list)

    def summary(self, t0: float) -> dict[str, Any]:
        """The requests that ended after `t0` (the writers were all busy from `t0` on; the
        first request, which warms its shape, is before it): throughput over `t0` to the last
        end, and their latencies."""
        after = [d for d in self.done if d[1] > t0]
        span = max(e for _, e, _ in after) - t0 if after else float("nan")
        return {"memories": sum(k for *_, k in after), "seconds": span,
                "per_s": sum(k for *_, k in after) / span if after else float("nan"),
                "requests": len(after), "ms": [(e - s) * 1000 for s, e, _ in after]}


def sentences(seed: int) -> Iterator[str]:
    """New memory texts: ing.make_sentences(seed, n)'s sentences, without end."""
    rng = random.Random(seed)
    while True:
        yield ing.make_sentence(rng)


async def checked(client: LeanHttp, path: str, body: Any, want: int) -> bytes:
    status, answer = await asyncio.wait_for(client.request("POST", path, body), TIMEOUT_S)
    if status != want:
        raise RuntimeError(f"POST {path} -> {status}: {answer[:300]!r}")
    return answer


async def writer(port: int, batch: int, texts: Iterator[str], users: list[str],
                 rng: random.Random, stop: asyncio.Event, out: Writes) -> None:
    """Writes `batch` memories a request (one through POST /v1/memories when `batch` is 1)
    back to back until `stop`."""
    client = LeanHttp(port)
    try:
        while not stop.is_set():
            items = [{"content": next(texts), "user_id": rng.choice(users)}
                     for _ in range(batch)]
            path, body = (("/v1/memories", items[0]) if batch == 1
                          else ("/v1/memories/batch", {"items": items}))
            t = time.perf_counter()
            await checked(client, path, body, 201)
            out.done.append((t, time.perf_counter(), batch))
    finally:
        await client.close()


async def searches(client: LeanHttp, questions: list[str], scopes: dict[str, dict[str, Any]],
                   rng: random.Random, check: Callable[[], None]) -> dict[str, list[float]]:
    """Each question asked in each scope, one after the other: milliseconds per scope."""
    out: dict[str, list[float]] = {name: [] for name in scopes}
    for q in questions:
        for name, fields in scopes.items():
            check()
            await asyncio.sleep(rng.uniform(*PAUSE_MS) / 1000)
            t = time.perf_counter()
            await checked(client, "/v1/search", {"query": q, "top_k": 10, **fields}, 200)
            out[name].append((time.perf_counter() - t) * 1000)
    return out


async def run(args: argparse.Namespace, cleanup: ing.Cleanup, res: dict[str, Any]) -> None:
    from app.models import DEFAULT_TENANT_ID

    url, _, tmp = await ing.start_database(cleanup, "search-ingest", res["env"])
    sargs = sb.parse_args(["--rows", str(args.rows), "--seed", str(args.seed)])
    base_texts, base, _ = await sb.base_embeddings(sargs.seed, sargs.base_sentences)
    seeded = await sb.seed(sargs, url, args.rows, base, base_texts, DEFAULT_TENANT_ID)
    res["large_user_rows"] = seeded["large_user_rows"]
    questions = sb.make_questions(args.seed + 500, args.queries + 3)
    warm, questions = questions[:3], questions[3:]
    scopes: dict[str, dict[str, Any]] = {"tenant-wide": {},
                                         "large user": {"user_id": seeded["large_user"]}}
    users: list[str] = seeded["small_users"]
    texts = sentences(args.seed + 7000)
    rng = random.Random(args.seed)

    service = await sb.open_service(cleanup, url, tmp)
    conn = await ing.connect(url)
    client = LeanHttp(service.port)
    phases: list[dict[str, Any]] = []

    async def phase(name: str, batches: list[int], search: bool) -> None:
        """`batches`' writers (one per entry, that many memories a request) running; once
        each has finished a request, the searches (or --seconds) run; then the writers stop
        after their request in flight."""
        row: dict[str, Any] = {"phase": name, "rows_at_start": await ing.count_rows(conn),
                               "batches": batches}
        stop, writes = asyncio.Event(), Writes()
        tasks = [asyncio.create_task(writer(service.port, b, texts, users, rng, stop, writes))
                 for b in batches]

        def check() -> None:  # a writer that failed fails the run now
            for task in tasks:
                if task.done():
                    task.result()

        try:
            while len(writes.done) < len(batches):
                check()
                await asyncio.sleep(0.01)
            t0 = time.perf_counter()
            if search:
                await client.close()  # uvicorn drops a socket idle 5 s; the next call reopens
                row["search"] = await searches(client, questions, scopes, rng, check)
            else:
                done, _ = await asyncio.wait(tasks, timeout=args.seconds)
                for task in done:
                    task.result()
            row["search_s"] = time.perf_counter() - t0
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        if batches:
            row["writes"] = writes.summary(t0)
        phases.append(row)
        every = [t for ts in row.get("search", {}).values() for t in ts]
        ing.log(f"{name}: " + (f"search p50 {ing.pct(every, 50):.1f} ms, p95 "
                               f"{ing.pct(every, 95):.1f} ms " if every else "")
                + (f"writes {row['writes']['per_s']:.0f}/s" if batches else ""))

    try:
        await sb.timed(len(warm), lambda i: searches(client, [warm[i]], scopes, rng,
                                                     lambda: None))
        await phase("alone", [], True)
        for batch in [args.batch] + ([args.big_batch] if args.big_batch else []):
            await phase(f"ingest alone, batches of {batch}", [batch], False)
            await phase(f"search during ingest, batches of {batch}", [batch], True)
        await phase(f"search during single writes, {args.single_writers} writers",
                    [1] * args.single_writers, True)
        await phase("alone, at the end", [], True)
    finally:
        await client.close()
        await conn.close()
        await service.close()
    res["phases"] = phases


def report(res: dict[str, Any]) -> str:
    a = res["args"]
    lines = [
        f"Search under ingest -- {res['env'].get('postgres')}, pgvector "
        f"{res['env'].get('pgvector')}, {a['rows']:,} memories seeded in one tenant (the "
        f"large user {res['large_user_rows']:,}); {a['queries']} questions x 2 scopes a "
        f"phase, sequential (lean client, {PAUSE_MS[0]:.0f}-{PAUSE_MS[1]:.0f} ms pause)",
        "",
        "| phase | rows at start | searches p50 / p95 / max ms | tenant-wide p50 / p95 "
        f"| large user p50 / p95 | searches > {SLOW_MS:.0f} ms (share of search time) "
        "| writes/s | write request p50 / p95 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]

    def pp(times: list[float]) -> str:
        return f"{ing.pct(times, 50):.1f} / {ing.pct(times, 95):.1f}"

    for r in res["phases"]:
        s, w = r.get("search"), r.get("writes")
        every = [t for ts in s.values() for t in ts] if s else []
        slow = [t for t in every if t > SLOW_MS]
        lines.append(
            f"| {r['phase']} | {r['rows_at_start']:,} | "
            + (f"{pp(every)} / {max(every):.1f} | {pp(s['tenant-wide'])} | "
               f"{pp(s['large user'])} | {len(slow)} of {len(every)} "
               f"({sum(slow) / sum(every):.0%}) | " if s else "- | - | - | - | ")
            + (f"{w['per_s']:.0f} | {pp(w['ms'])} |" if w else "- | - |"))
    lines.append(f"\nwall time {res['total_s']:.0f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=50,
                        help="questions a search phase (each asked in both scopes)")
    parser.add_argument("--batch", type=int, default=100, help="memories a batch request")
    parser.add_argument("--big-batch", type=int, default=500, help="the second batch size; 0 "
                        "skips it")
    parser.add_argument("--seconds", type=float, default=20.0, help="each ingest-alone phase")
    parser.add_argument("--single-writers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--json", default=None,
                        help="results path (default bench/results/search-ingest-<time>.json; "
                        "'none')")
    args = parser.parse_args(argv)
    return ing.run_main("search-ingest", args, argv, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
