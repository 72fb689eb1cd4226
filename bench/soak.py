"""Soak: does a long-running service level off, or grow with the requests it serves?

A throwaway embedded PostgreSQL (migrated to head) and one service on it, as a team runs
it: auth on (--tenants tenants, one key each), the real local model (`--embedder hash` for
a quicker run), an LLM (tests/fakes/llm_server.py: a real chat-completions server on
127.0.0.1) for the `llm` strategy and the sessions' rolling summaries, automatic
consolidation every 20 memories of a scope and folds every 8 turns, so the background
work runs too. --clients clients (bench/lean_http.py, keep-alive) each send, for
--minutes, a mix drawn at random:
  writes      POST /v1/memories (a tenth with an Idempotency-Key, sent twice), batches of
              10, PATCH, DELETE by id;
  reads       POST /v1/search (scoped to a user or the whole tenant, a fifth with
              `explain`), GET by id, GET a user's newest 20;
  sessions    POST /v1/sessions/{id}/turns (a new session every 24 turns), and every
              fourth turn GET .../context;
  operators   POST /v1/consolidations (sync, `simple` or `llm`, one user's memories);
  refusals    a 422 (top_k 0), a 404 (an id that does not exist), a 401 (a wrong key).
Users and sessions keep being new (2,000 users a tenant), so anything the process keeps
per user, session or tenant would show.

Every --sample seconds it reads the service's own figures from GET /metrics
(process_resident_memory_bytes, process_open_fds), its threads (psutil), the server's
backends by application_name (pg_stat_activity), and the window's request rate, p50/p95
(all requests; search, create and turn alone), statuses, and CPU a request of the service
process (its background work included) and of PostgreSQL. At the end: the resident
memory after the warm-up (the first fifth of the run, at least 2 minutes) against the
end, its least-squares slope (MB an hour, MB per 100k requests), descriptors, threads and
backends at most, the tables' rows, p50/p95 by request, answers of an unexpected status
and the service log's ERROR and Traceback lines (either makes the exit status 1). A leak
is a slope that does not flatten over a longer run; a few MB early on is the allocator
and the caches filling (SQLAlchemy's compiled statements, asyncpg's prepared ones, the
model's arena). Latency and CPU a request rise as the tables grow (more rows to search,
a larger HNSW graph to insert into, autovacuum) and as scopes reach their automatic
consolidation: that part levels off too.

Run: `HF_HUB_OFFLINE=1 .venv/bin/python bench/soak.py` (20 minutes; --minutes 3 for a
look). docs/benchmarks/soak_2026-11-27.md has two runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)

import httpx  # noqa: E402
import ingest as ing  # noqa: E402  (bench/ingest.py: database and process control)
import psutil  # noqa: E402
from lean_http import LeanHttp  # noqa: E402

from tests.fakes.llm_server import FakeLLMServer  # noqa: E402

USERS = 2000
TURNS_A_SESSION = 24
QUESTIONS = ["what does {} like to eat", "where did {} go last summer", "who works on the "
             "garden project", "recap what we discussed about {}", "when is the next meeting",
             "summary of {}'s plans", "which books did {} mention", "tl;dr of the trip"]
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]


async def make_keys(url: str, n: int) -> list[str]:
    """One API key for each of `n` new tenants."""
    from app.db import create_engine, create_sessionmaker
    from app.settings import Settings
    from app.tenants.keys import display_prefix, hash_key, new_key
    from app.tenants.repository import TenantRepository

    keys = []
    engine = create_engine(url, Settings(database_url=url, _env_file=None))
    try:
        async with create_sessionmaker(engine)() as session:
            repo = TenantRepository(session)
            for i in range(n):
                tenant = await repo.ensure_tenant(f"soak-{i}")
                key = new_key()
                await repo.add_key(tenant.id, "soak", display_prefix(key), hash_key(key))
                keys.append(key)
            await session.commit()
    finally:
        await engine.dispose()
    return keys


@dataclass
class Window:
    """What the clients saw since the last sample."""

    latencies: list[float] = field(default_factory=list)
    by_op: dict[str, list[float]] = field(default_factory=dict)
    statuses: Counter[int] = field(default_factory=Counter)


@dataclass
class Tally:
    window: Window = field(default_factory=Window)
    by_op: dict[str, list[float]] = field(default_factory=dict)
    statuses: Counter[int] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    requests: int = 0

    def take(self) -> Window:
        window, self.window = self.window, Window()
        return window


class Client:
    """One agent: a tenant's key, its own keep-alive connection, the ids it made."""

    def __init__(self, n: int, port: int, key: str, tally: Tally, seed: int) -> None:
        self.n = n
        self.http = LeanHttp(port, {"authorization": f"Bearer {key}"})
        self.wrong = LeanHttp(port, {"authorization": "Bearer egm_not_a_key_at_all_000000"})
        self.tally = tally
        self.rng = random.Random(seed)
        self.ids: deque[str] = deque(maxlen=400)
        self.turns = 0
        ops: list[tuple[Callable[[], Awaitable[None]], int]] = [
            (self.create, 18), (self.batch, 4), (self.patch, 5), (self.delete, 3),
            (self.search, 25), (self.get, 10), (self.list, 7), (self.turn, 20),
            (self.consolidate, 1), (self.refusal, 3),
        ]
        self.ops = [op for op, _ in ops]
        self.weights = [w for _, w in ops]

    def user(self) -> str:
        return f"user-{self.rng.randrange(USERS)}"

    def content(self) -> str:
        return ing.make_sentence(self.rng)

    async def call(self, op: str, method: str, path: str, body: Any = None,
                   expect: tuple[int, ...] = (200,), http: LeanHttp | None = None,
                   headers: dict[str, str] | None = None) -> Any:
        t = time.perf_counter()
        status, answer = await (http or self.http).request(method, path, body, headers)
        elapsed = time.perf_counter() - t
        tally = self.tally
        tally.requests += 1
        tally.statuses[status] += 1
        tally.window.statuses[status] += 1
        tally.window.latencies.append(elapsed)
        tally.by_op.setdefault(op, []).append(elapsed)
        tally.window.by_op.setdefault(op, []).append(elapsed)
        if status not in expect and len(tally.unexpected) < 20:
            tally.unexpected.append(f"{method} {path} -> {status}: {answer[:200]!r}")
        return json.loads(answer) if answer and status < 300 else None

    async def create(self) -> None:
        body = {"content": self.content(), "user_id": self.user(),
                "tags": [f"topic-{self.rng.randrange(12)}"],
                "importance": round(self.rng.random(), 2), "metadata": {"client": self.n}}
        if self.rng.random() < 0.1:  # a retry with the same key answers the first result
            headers = {"idempotency-key": uuid.uuid4().hex}
            await self.call("create (idempotent)", "POST", "/v1/memories", body, (201,),
                            headers=headers)
            made = await self.call("create (idempotent)", "POST", "/v1/memories", body,
                                   (201,), headers=headers)
        else:
            made = await self.call("create", "POST", "/v1/memories", body, (201,))
        if made:
            self.ids.append(made["id"])

    async def batch(self) -> None:
        user = self.user()
        items = [{"content": self.content(), "user_id": user} for _ in range(10)]
        made = await self.call("batch of 10", "POST", "/v1/memories/batch", {"items": items},
                               (201,))
        if made:
            self.ids.extend(m["id"] for m in made["items"])

    def some_id(self) -> str | None:
        return self.ids[self.rng.randrange(len(self.ids))] if self.ids else None

    async def patch(self) -> None:
        if (memory_id := self.some_id()) is not None:
            await self.call("patch", "PATCH", f"/v1/memories/{memory_id}",
                            {"importance": round(self.rng.random(), 2)}, (200, 404))

    async def delete(self) -> None:
        if self.ids:
            memory_id = self.ids.popleft()
            await self.call("delete", "DELETE", f"/v1/memories/{memory_id}", None, (204, 404))

    async def search(self) -> None:
        question = self.rng.choice(QUESTIONS).format(self.rng.choice(NAMES))
        body: dict[str, Any] = {"query": question, "top_k": self.rng.choice((5, 10, 20))}
        if self.rng.random() < 0.7:
            body["user_id"] = self.user()
        if self.rng.random() < 0.2:
            body["explain"] = True
        await self.call("search", "POST", "/v1/search", body)

    async def get(self) -> None:
        # An archived memory (folded by a consolidation) is still found; a deleted one not.
        if (memory_id := self.some_id()) is not None:
            await self.call("get", "GET", f"/v1/memories/{memory_id}", None, (200, 404))

    async def list(self) -> None:
        await self.call("list", "GET", f"/v1/memories?user_id={self.user()}&limit=20")

    async def turn(self) -> None:
        session = f"soak-{self.n}-{self.turns // TURNS_A_SESSION}"
        role = "user" if self.turns % 2 == 0 else "assistant"
        await self.call("turn", "POST", f"/v1/sessions/{session}/turns",
                        {"role": role, "content": self.content()}, (201,))
        if self.turns % 4 == 3:
            await self.call("context", "GET", f"/v1/sessions/{session}/context")
        self.turns += 1

    async def consolidate(self) -> None:
        body = {"user_id": self.user(), "strategy": self.rng.choice(("simple", "llm")),
                "group_threshold": 2}
        # 409 while another run (an automatic one) holds the scope: runs never interleave.
        await self.call("consolidation", "POST", "/v1/consolidations", body, (200, 409))

    async def refusal(self) -> None:
        kind = self.rng.randrange(3)
        if kind == 0:
            await self.call("refused", "POST", "/v1/search", {"query": "x", "top_k": 0}, (422,))
        elif kind == 1:
            await self.call("refused", "GET", f"/v1/memories/{uuid.uuid4()}", None, (404,))
        else:
            await self.call("refused", "GET", "/v1/memories", None, (401,), http=self.wrong)
            await self.wrong.close()  # idle past the server's keep-alive, it would be closed

    async def run(self, until: float) -> None:
        while time.monotonic() < until:
            await self.rng.choices(self.ops, self.weights)[0]()
        await self.http.close()
        await self.wrong.close()


def metric(text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else float("nan")


def counted(text: str, name: str, labels: str = "") -> int:
    """The sum of counter `name`'s samples whose labels contain `labels`."""
    return int(sum(float(m.group(2)) for m in re.finditer(
        rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.MULTILINE) if labels in m.group(1)))


async def sample(metrics: LeanHttp, process: psutil.Process, url: str) -> dict[str, Any]:
    _, body = await metrics.request("GET", "/metrics")
    await metrics.close()  # idle past the server's keep-alive until the next sample
    text = body.decode()
    conn = await ing.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT application_name, count(*) AS n FROM pg_stat_activity "
            "WHERE application_name LIKE 'engram%' GROUP BY 1 ORDER BY 1")
    finally:
        await conn.close()
    return {
        "rss_mb": metric(text, "process_resident_memory_bytes") / 2**20,
        "fds": int(metric(text, "process_open_fds")),
        "auto_runs": counted(text, "engram_consolidation_runs_total", 'trigger="auto"'),
        "folds": counted(text, "engram_session_folds_total"),
        "threads": process.num_threads(),
        "backends": {r["application_name"]: r["n"] for r in rows},
    }


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys over xs (0 with fewer than two points)."""
    if len(xs) < 2:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0


async def run(args: argparse.Namespace, cleanup: ing.Cleanup) -> dict[str, Any]:
    env: dict[str, Any] = {}
    url, postmaster, tmp = await ing.start_database(cleanup, "soak", env)
    keys = await make_keys(url, args.tenants)
    port = ing.free_port()
    with FakeLLMServer() as llm:
        proc, log_path = ing.start_server(cleanup, url, args.embedder, port, tmp, None, {
            "ENGRAM_AUTH_ENABLED": "true", "ENGRAM_LLM_BASE_URL": llm.base_url,
            "ENGRAM_LLM_MODEL": "fake", "ENGRAM_AUTO_CONSOLIDATE_EVERY": "20",
            "ENGRAM_SESSION_FOLD_THRESHOLD": "8", "ENGRAM_SESSION_RECENT_TURNS": "4",
        })
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await ing.wait_ready(proc, client, log_path, 180.0)
        process = psutil.Process(proc.pid)
        cpu = ing.CpuProbe(postmaster, proc.pid)
        snap = cpu.snap()
        tally = Tally()
        metrics = LeanHttp(port)
        start = time.monotonic()
        until = start + args.minutes * 60
        clients = [Client(i, port, keys[i % len(keys)], tally, args.seed + i)
                   for i in range(args.clients)]
        tasks = [asyncio.create_task(c.run(until)) for c in clients]
        samples = [{"t": 0.0, "requests": 0, **await sample(metrics, process, url)}]
        ing.log(f"soak: {args.minutes} min, {args.clients} clients, {args.tenants} tenants, "
                f"embedder {args.embedder}")
        while not all(t.done() for t in tasks):
            await asyncio.wait(tasks, timeout=args.sample)
            if failed := [t for t in tasks if t.done() and t.exception()]:
                for t in tasks:
                    t.cancel()
                raise failed[0].exception()  # type: ignore[misc]
            window = tally.take()
            now = time.monotonic() - start
            taken = cpu.snap()
            used, snap = ing.CpuProbe.delta(snap, taken), taken
            served = max(1, len(window.latencies))
            lat = sorted(window.latencies)
            row = {"t": now, "requests": tally.requests, "n": len(lat),
                   "p50_ms": ing.pct(lat, 50) * 1e3 if lat else 0.0,
                   "p95_ms": ing.pct(lat, 95) * 1e3 if lat else 0.0,
                   "5xx": sum(n for s, n in window.statuses.items() if s >= 500),
                   "service_cpu_ms": used["server_cpu_s"] * 1e3 / served,
                   "pg_cpu_ms": used["pg_cpu_s"] * 1e3 / served,
                   **{f"{op}_p50_ms": ing.pct(window.by_op.get(op, []), 50) * 1e3
                      for op in ("search", "create", "turn")},
                   **await sample(metrics, process, url)}
            samples.append(row)
            ing.log(f"{now / 60:5.1f} min  {row['n'] / (now - samples[-2]['t']):6.1f} req/s  "
                    f"p50 {row['p50_ms']:6.1f} ms  p95 {row['p95_ms']:6.1f} ms  "
                    f"rss {row['rss_mb']:7.1f} MB  fds {row['fds']:4d}  "
                    f"threads {row['threads']:3d}  backends {sum(row['backends'].values())}")
        for t in tasks:
            t.result()
        await metrics.close()
        cleanup.stop_server(proc)
    conn = await ing.connect(url)
    try:
        rows = {table: await conn.fetchval(f"SELECT count(*) FROM {table}")
                for table in ("memories", "session_turns", "consolidation_runs", "term_stats")}
    finally:
        await conn.close()
    log = log_path.read_text(errors="replace")
    return {"env": env, "args": vars(args), "samples": samples, "tally": tally, "rows": rows,
            "log_errors": [line for line in log.splitlines()
                           if " ERROR " in line or "Traceback" in line][:20]}


def report(out: dict[str, Any]) -> str:
    samples, tally, args = out["samples"], out["tally"], out["args"]
    total_s = samples[-1]["t"]
    warm_s = max(120.0, total_s / 5)
    settled = [s for s in samples if s["t"] >= warm_s] or samples[-1:]
    first, last = settled[0], samples[-1]
    ts = [s["t"] / 3600 for s in settled]
    rss = [s["rss_mb"] for s in settled]
    reqs = [s["requests"] / 1e5 for s in settled]
    lines = [
        f"# Soak: {total_s / 60:.1f} min, {args['clients']} clients, {args['tenants']} "
        f"tenants, embedder {args['embedder']} ({out['env'].get('postgres')}, pgvector "
        f"{out['env'].get('pgvector')})",
        "",
        "| min | requests | req/s | p50 ms | p95 ms | search / create / turn p50 ms | "
        "CPU ms a request: service / PostgreSQL | automatic runs / folds | 5xx | RSS MB | "
        "fds | threads | backends |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
        "---: |",
    ]
    prev = samples[0]
    for s in samples[1:]:
        rate = s["n"] / (s["t"] - prev["t"]) if s["t"] > prev["t"] else 0.0
        by_op = " / ".join(f"{s[f'{op}_p50_ms']:.1f}" for op in ("search", "create", "turn"))
        lines.append(f"| {s['t'] / 60:.1f} | {s['requests']} | {rate:.0f} | "
                     f"{s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {by_op} | "
                     f"{s['service_cpu_ms']:.2f} / {s['pg_cpu_ms']:.2f} | "
                     f"{s['auto_runs'] - prev['auto_runs']} / {s['folds'] - prev['folds']} | "
                     f"{s['5xx']} | "
                     f"{s['rss_mb']:.1f} | {s['fds']} | {s['threads']} | "
                     f"{sum(s['backends'].values())} |")
        prev = s
    lines += [
        "",
        f"Requests: {tally.requests} (by status: "
        f"{', '.join(f'{k} {v}' for k, v in sorted(tally.statuses.items()))}).",
        f"Resident memory: {samples[0]['rss_mb']:.1f} MB ready, {first['rss_mb']:.1f} MB after "
        f"the warm-up ({first['t'] / 60:.1f} min), {last['rss_mb']:.1f} MB at the end "
        f"({last['rss_mb'] - first['rss_mb']:+.1f} MB over {last['requests'] - first['requests']}"
        f" requests); slope after the warm-up {slope(ts, rss):+.1f} MB an hour, "
        f"{slope(reqs, rss):+.1f} MB per 100k requests.",
        f"File descriptors: {first['fds']} after the warm-up, at most "
        f"{max(s['fds'] for s in samples)}, {last['fds']} at the end. Threads: "
        f"{first['threads']} after the warm-up, at most {max(s['threads'] for s in samples)}. "
        f"Backends: at most {max(sum(s['backends'].values()) for s in samples)}; at the end "
        f"{', '.join(f'{k} {v}' for k, v in last['backends'].items())}.",
        f"Rows at the end: {', '.join(f'{k} {v}' for k, v in out['rows'].items())}.",
        "",
        "| request | n | p50 ms | p95 ms |",
        "| --- | ---: | ---: | ---: |",
    ]
    for op, xs in sorted(tally.by_op.items()):
        xs = sorted(xs)
        lines.append(f"| {op} | {len(xs)} | {ing.pct(xs, 50) * 1e3:.1f} | "
                     f"{ing.pct(xs, 95) * 1e3:.1f} |")
    lines.append("")
    lines.append(f"Unexpected answers: {len(tally.unexpected)}"
                 + "".join(f"\n  {u}" for u in tally.unexpected))
    lines.append(f"Service log ERROR/Traceback lines: {len(out['log_errors'])}"
                 + "".join(f"\n  {e}" for e in out["log_errors"]))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--tenants", type=int, default=3)
    parser.add_argument("--sample", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--embedder", default="local", choices=("local", "hash"))
    parser.add_argument("--seed", type=int, default=20261127)
    parser.add_argument("--json", action="store_true", help="also print the samples as JSON")
    args = parser.parse_args()
    cleanup = ing.Cleanup()
    try:
        out = asyncio.run(run(args, cleanup))
    finally:
        cleanup.run()
    print(report(out))
    if args.json:
        print(json.dumps(out["samples"], indent=2))
    unexpected = out["tally"].unexpected or out["log_errors"]
    return 1 if unexpected else 0


if __name__ == "__main__":
    raise SystemExit(main())
