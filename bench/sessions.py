"""Latency of the session endpoints: append a turn, read the context, read the session.

A throwaway embedded PostgreSQL (migrated to head) and the service as a subprocess
(`hash` embedder, auth off; the session settings pinned to their defaults: a rolling
summary with the extractive summariser, fold threshold 20, recent turns 10, budget 2000
tokens). --sessions sessions get --turns turns each (user and assistant alternating,
one user per session), from --seed-clients clients at once, each client appending the
next turn of each of its sessions in turn; at 40 turns a session is folded three times
by the background worker while the seeding goes on. The seeding throughput (turns/s) is
printed, then the time until the folds have caught up (`backlog.due == 0` on a sample
of sessions, polled through GET /v1/sessions/{id}).

Then one client (bench/lean_http.py: no client library in the figures) sends, one at a
time, --requests of each (after --warmup not counted):
  POST /v1/sessions/{id}/turns     a turn appended to a random seeded session (locks
                                   the session row, inserts the turn, updates the row;
                                   a seeded session is left with 10 unsummarised turns
                                   and a fold is due at 20, so spread over the sessions
                                   these appends rarely queue one: "after measuring"
                                   shows whether any did);
  GET /v1/sessions/{id}/context    a random seeded session's summary and newest turns
                                   (the mean turns returned and the share with a summary
                                   are printed, to show the context is a real one);
  GET /v1/sessions/{id}            a random seeded session's cursor, counts, health;
  POST /v1/sessions/{new}/turns    the first turn of a new session (creates its row).
Prints p50/p95 per request, with the CPU milliseconds per request of the service process
and of PostgreSQL and the cores other processes kept busy meanwhile (a shared machine's
load shows there); the session table's row updates over the run and how many were HOT;
the server log's warnings and errors if any; and with --json the figures as JSON too.

Run: `HF_HUB_OFFLINE=1 .venv/bin/python bench/sessions.py` (about a minute on 2 idle
cores, most of it seeding).
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

SESSION_ENV = {
    "ENGRAM_AUTH_ENABLED": "false",
    "ENGRAM_SESSION_STRATEGY": "rolling_summary",
    "ENGRAM_SESSION_SUMMARISER": "extractive",
    "ENGRAM_SESSION_FOLD_THRESHOLD": "20",
    "ENGRAM_SESSION_RECENT_TURNS": "10",
    "ENGRAM_SESSION_BUDGET_TOKENS": "2000",
}
ROLES = ("user", "assistant")
Request = Callable[[int], tuple[str, str, Any]]


def seeded(i: int) -> str:
    return f"bench-{i:05d}"


def turn(rng: random.Random, session: int, n: int) -> dict[str, Any]:
    """The `n`th turn (from 0) of seeded session `session`."""
    return {"role": ROLES[n % 2], "content": ing.make_sentence(rng),
            "user_id": f"user-{session}"}


async def checked(http: LeanHttp, method: str, path: str, body: Any = None) -> bytes:
    status, answer = await http.request(method, path, body)
    if status not in (200, 201):
        raise RuntimeError(f"{method} {path} -> {status}: {answer[:300]!r}")
    return answer


async def seed(port: int, args: argparse.Namespace) -> float:
    """Append --turns turns to each of --sessions sessions; the seconds it took."""
    async def client(k: int) -> None:
        rng = random.Random(args.seed * 1000 + k)
        mine = range(k, args.sessions, args.seed_clients)
        http = LeanHttp(port)
        try:
            for n in range(args.turns):
                for s in mine:
                    await checked(http, "POST", f"/v1/sessions/{seeded(s)}/turns",
                                  turn(rng, s, n))
        finally:
            await http.close()

    t = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(args.seed_clients)))
    return time.perf_counter() - t


async def wait_folds(http: LeanHttp, sample: list[int], limit_s: float) -> dict[str, Any]:
    """Poll GET /v1/sessions/{id} for `sample` until none has a fold due."""
    t = time.perf_counter()
    pending = list(sample)
    polls = 0
    while pending:
        polls += 1
        still = []
        for s in pending:
            state = json.loads(await checked(http, "GET", f"/v1/sessions/{seeded(s)}"))
            if state["backlog"]["due"] > 0:
                still.append(s)
        pending = still
        if not pending:
            break
        if time.perf_counter() - t > limit_s:
            raise RuntimeError(f"folds not caught up after {limit_s:.0f} s: "
                               f"{len(pending)} of {len(sample)} sampled sessions "
                               f"still have folds due")
        await asyncio.sleep(0.2)
    return {"seconds": time.perf_counter() - t, "polls": polls}


async def survey(http: LeanHttp, sessions: int) -> dict[str, Any]:
    """Every seeded session's counts, once: folds still due, health, summarised turns."""
    due = unhealthy = summarised = dropped = 0
    for s in range(sessions):
        state = json.loads(await checked(http, "GET", f"/v1/sessions/{seeded(s)}"))
        due += state["backlog"]["due"] > 0
        unhealthy += state["health"]["state"] != "healthy"
        summarised += state["counts"]["summarised"]
        dropped += state["counts"]["dropped"]
    return {"sessions_with_folds_due": due, "sessions_not_healthy": unhealthy,
            "mean_summarised_turns": summarised / sessions, "dropped_turns": dropped}


def server_log_problems(log_path: Path) -> list[str]:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ["(no server log)"]
    return [line for line in lines
            if any(word in line for word in ("WARNING", "ERROR", "CRITICAL", "Traceback"))]


async def run(args: argparse.Namespace, cleanup: ing.Cleanup) -> dict[str, Any]:
    env: dict[str, Any] = {}
    url, pm_pid, tmp = await ing.start_database(cleanup, "sessions", env)
    port = ing.free_port()
    proc, log_path = ing.start_server(cleanup, url, "hash", port, tmp, None, SESSION_ENV)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        await ing.wait_ready(proc, client, log_path, 120.0)
    try:
        out = await measure(args, port, log_path, env, ing.CpuProbe(pm_pid, proc.pid))
        out["sessions_table"] = await table_stats(url)
        return out
    except BaseException:
        print(f"server log, last lines:\n{ing.tail(log_path)}", file=sys.stderr)
        raise


async def table_stats(url: str) -> dict[str, int]:
    """The session table's row updates, how many were HOT (in place, no index entry), and
    its dead row versions, as PostgreSQL counted them over the whole run."""
    await asyncio.sleep(1.5)  # backends send their counts at most once a second
    conn = await ing.connect(url)
    try:
        row = await conn.fetchrow(
            "SELECT n_tup_upd, n_tup_hot_upd, n_dead_tup, n_live_tup"
            " FROM pg_stat_user_tables WHERE relname = 'sessions'")
    finally:
        await conn.close()
    return {"updates": row["n_tup_upd"], "hot_updates": row["n_tup_hot_upd"],
            "dead_rows": row["n_dead_tup"], "live_rows": row["n_live_tup"]}


def cpu_per_request(cpu: dict[str, float], n: int) -> dict[str, float]:
    """CPU milliseconds per request of the service and of PostgreSQL, and the cores
    everything else on the machine kept busy meanwhile (another process's load shows)."""
    return {"server_cpu_ms": cpu["server_cpu_s"] * 1000 / n,
            "pg_cpu_ms": cpu["pg_cpu_s"] * 1000 / n,
            "other_cores": cpu["other_cpu_s"] / cpu["wall_s"]}


async def measure(args: argparse.Namespace, port: int, log_path: Path,
                  env: dict[str, Any], probe: ing.CpuProbe) -> dict[str, Any]:
    ing.log(f"seeding {args.sessions} sessions x {args.turns} turns "
            f"({args.seed_clients} clients)")
    snap = probe.snap()
    seed_s = await seed(port, args)
    seeded_turns = args.sessions * args.turns
    seed_cpu = cpu_per_request(ing.CpuProbe.delta(snap, probe.snap()), seeded_turns)
    ing.log(f"seeded {seeded_turns:,} turns in {seed_s:.1f} s "
            f"({seeded_turns / seed_s:,.0f} turns/s; other processes kept "
            f"{seed_cpu['other_cores']:.2f} cores busy)")

    rng = random.Random(args.seed)
    http = LeanHttp(port)
    sample = rng.sample(range(args.sessions), min(args.sample, args.sessions))
    folds = await wait_folds(http, sample, args.fold_timeout)
    ing.log(f"folds caught up on {len(sample)} sampled sessions {folds['seconds']:.2f} s "
            f"after the seeding ({folds['polls']} polls)")
    after_seed = await survey(http, args.sessions)
    ing.log(f"all sessions: {after_seed}")

    total = args.warmup + args.requests
    picks = {name: [rng.randrange(args.sessions) for _ in range(total)]
             for name in ("append", "context", "get")}
    appends = random.Random(args.seed + 1)
    requests: dict[str, Request] = {
        "POST /v1/sessions/{id}/turns (existing)": lambda i: (
            "POST", f"/v1/sessions/{seeded(picks['append'][i])}/turns",
            turn(appends, picks["append"][i], args.turns + i)),
        "GET /v1/sessions/{id}/context": lambda i: (
            "GET", f"/v1/sessions/{seeded(picks['context'][i])}/context", None),
        "GET /v1/sessions/{id}": lambda i: (
            "GET", f"/v1/sessions/{seeded(picks['get'][i])}", None),
        "POST /v1/sessions/{new}/turns (first turn)": lambda i: (
            "POST", f"/v1/sessions/new-{i:06d}/turns",
            {"role": "user", "content": ing.make_sentence(appends),
             "user_id": f"new-user-{i}"}),
    }
    times: dict[str, list[float]] = {r: [] for r in requests}
    cpu: dict[str, dict[str, float]] = {}
    contexts: list[dict[str, Any]] = []
    for what, make in requests.items():
        for i in range(total):
            if i == args.warmup:
                snap = probe.snap()
            method, path, body = make(i)
            t = time.perf_counter()
            status, answer = await http.request(method, path, body)
            ms = (time.perf_counter() - t) * 1000
            if status not in (200, 201):
                raise RuntimeError(f"{method} {path} -> {status}: {answer[:300]!r}")
            if i >= args.warmup:
                times[what].append(ms)
                if what == "GET /v1/sessions/{id}/context":
                    contexts.append(json.loads(answer))
        cpu[what] = cpu_per_request(ing.CpuProbe.delta(snap, probe.snap()), args.requests)
    after_measure = await survey(http, args.sessions)
    await http.close()
    problems = server_log_problems(log_path)
    return {
        "env": env, "sessions": args.sessions, "turns": args.turns,
        "seed_clients": args.seed_clients, "requests": args.requests,
        "loadavg": os.getloadavg()[0],
        "seeding": {"turns": seeded_turns, "seconds": seed_s,
                    "turns_per_s": seeded_turns / seed_s, **seed_cpu},
        "fold_catch_up": {"sampled_sessions": len(sample), **folds},
        "after_seeding": after_seed, "after_measuring": after_measure,
        "context": {
            "mean_turns": sum(len(c["turns"]) for c in contexts) / len(contexts),
            "with_summary": sum(bool(c["summary"]) for c in contexts) / len(contexts),
            "mean_tokens": sum(c["tokens"] for c in contexts) / len(contexts),
            "mean_summary_chars": sum(len(c["summary"] or "") for c in contexts)
            / len(contexts),
            "modes": sorted({c["mode"] for c in contexts}),
        },
        "server_log_problems": problems,
        "results": {what: {"p50": ing.pct(xs, 50), "p95": ing.pct(xs, 95), **cpu[what]}
                    for what, xs in times.items()},
    }


def report(out: dict[str, Any]) -> str:
    s, f, c = out["seeding"], out["fold_catch_up"], out["context"]
    lines = [
        f"Engram session endpoints -- {out['env'].get('postgres', '')}, {out['sessions']} "
        f"sessions x {out['turns']} turns seeded, {out['requests']} requests per row, "
        f"load average {out['loadavg']:.2f}",
        f"seeding: {s['turns']:,} turns in {s['seconds']:.1f} s = {s['turns_per_s']:,.0f} "
        f"turns/s ({out['seed_clients']} clients; CPU per turn: service "
        f"{s['server_cpu_ms']:.2f} ms, PostgreSQL {s['pg_cpu_ms']:.2f} ms; other processes "
        f"{s['other_cores']:.2f} cores); folds caught up {f['seconds']:.2f} s after "
        f"(sample of {f['sampled_sessions']})",
        f"after seeding: {out['after_seeding']}",
        f"after measuring: {out['after_measuring']}",
        f"context: {c['mean_turns']:.1f} turns on average, summary in "
        f"{c['with_summary']:.0%} ({c['mean_summary_chars']:,.0f} characters on average), "
        f"{c['mean_tokens']:,.0f} tokens, mode {'/'.join(c['modes'])}",
        "| request | p50 ms | p95 ms | service CPU ms/req | PostgreSQL CPU ms/req "
        "| other processes, cores |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for what, r in out["results"].items():
        lines.append(f"| {what} | {r['p50']:.2f} | {r['p95']:.2f} | {r['server_cpu_ms']:.2f} "
                     f"| {r['pg_cpu_ms']:.2f} | {r['other_cores']:.2f} |")
    t = out["sessions_table"]
    lines.append(f"sessions table: {t['updates']:,} row updates, {t['hot_updates']:,} HOT; "
                 f"{t['dead_rows']:,} dead and {t['live_rows']:,} live rows at the end")
    problems = out["server_log_problems"]
    lines.append(f"server log: {len(problems)} warning/error lines")
    lines += [f"  {line[:300]}" for line in problems[:10]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=40, help="turns per session to seed")
    parser.add_argument("--requests", type=int, default=500,
                        help="measured requests per operation")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--seed-clients", type=int, default=4,
                        help="clients appending the seed turns at once")
    parser.add_argument("--sample", type=int, default=50,
                        help="sessions polled until their folds have caught up")
    parser.add_argument("--fold-timeout", type=float, default=180.0,
                        help="seconds to wait for the folds (the stalled-fold sweep "
                             "runs every 60 s)")
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
        print(json.dumps({k: out[k] for k in ("seeding", "fold_catch_up", "after_seeding",
                                              "after_measuring", "context", "results",
                                              "sessions_table")},
                         indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
