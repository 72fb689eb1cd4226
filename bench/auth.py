"""What API key authentication costs a request: the same requests to a service with auth
on and one with auth off, over the same database.

A throwaway embedded PostgreSQL (migrated to head) gets an API key for the default tenant
and --memories memories of it (written through the service, `hash` embedder: the model is
not what is measured). Two services run on it, `ENGRAM_AUTH_ENABLED=true` and `false`,
and one client (bench/lean_http.py: no client library in the figures) sends each request
to both, alternating which goes first, for:
  GET /v1/memories/{id}   a cheap request, where the key lookup is most of the work;
  POST /v1/search         a search scoped to one user (hash embedder).
With auth off every request acts as the default tenant, so both services answer the same
rows. Prints p50/p95 per service and the p50 difference, which is what the key lookup
(current_caller in app/auth.py) adds; with --json, the figures as JSON too.

Run: `HF_HUB_OFFLINE=1 .venv/bin/python bench/auth.py` (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
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


async def create_key(url: str) -> str:
    """An API key for the default tenant (the one a service without auth acts as)."""
    from app.db import create_engine, create_sessionmaker
    from app.models import DEFAULT_TENANT_ID
    from app.settings import Settings
    from app.tenants.keys import display_prefix, hash_key, new_key
    from app.tenants.repository import TenantRepository

    engine = create_engine(url, Settings(database_url=url, _env_file=None))
    try:
        async with create_sessionmaker(engine)() as session:
            key = new_key()
            await TenantRepository(session).add_key(DEFAULT_TENANT_ID, "bench", display_prefix(key),
                                                    hash_key(key))
            await session.commit()
    finally:
        await engine.dispose()
    return key


async def run(args: argparse.Namespace, cleanup: ing.Cleanup) -> dict[str, Any]:
    env: dict[str, Any] = {}
    url, _, tmp = await ing.start_database(cleanup, "auth", env)
    key = await create_key(url)
    ports = {"auth on": ing.free_port(), "auth off": ing.free_port()}
    for label, port in ports.items():
        enabled = "true" if label == "auth on" else "false"
        proc, log_path = ing.start_server(cleanup, url, "hash", port, tmp, None,
                                          {"ENGRAM_AUTH_ENABLED": enabled},
                                          name="-" + label.replace(" ", "-"))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            await ing.wait_ready(proc, client, log_path, 120.0)

    auth = {"authorization": f"Bearer {key}"}
    rng = random.Random(args.seed)
    items = [{"content": ing.make_sentence(rng), "user_id": f"user-{i % USERS}"}
             for i in range(args.memories)]
    seeding = LeanHttp(ports["auth on"], auth)
    ids = [m["id"] for m in await seeding.write_memories(items)]
    await seeding.close()

    clients = {"auth on": LeanHttp(ports["auth on"], auth), "auth off": LeanHttp(ports["auth off"])}
    requests = {
        "GET /v1/memories/{id}": lambda i: ("GET", f"/v1/memories/{ids[i % len(ids)]}", None),
        "POST /v1/search": lambda i: ("POST", "/v1/search", {
            "query": ing.make_sentence(random.Random(i))[:80], "user_id": f"user-{i % USERS}"}),
    }
    times: dict[str, dict[str, list[float]]] = {r: {c: [] for c in clients} for r in requests}
    for what, make in requests.items():
        for i in range(args.warmup + args.requests):
            order = list(clients) if i % 2 else list(reversed(clients))
            for label in order:
                method, path, body = make(i)
                t = time.perf_counter()
                status, answer = await clients[label].request(method, path, body)
                ms = (time.perf_counter() - t) * 1000
                if status != 200:
                    raise RuntimeError(f"{label} {method} {path} -> {status}: {answer[:300]!r}")
                if i >= args.warmup:
                    times[what][label].append(ms)
    for c in clients.values():
        await c.close()

    out: dict[str, Any] = {"env": env, "memories": args.memories, "requests": args.requests,
                           "loadavg": os.getloadavg()[0], "results": {}}
    for what, by_client in times.items():
        out["results"][what] = {
            label: {"p50": ing.pct(xs, 50), "p95": ing.pct(xs, 95)}
            for label, xs in by_client.items()
        }
    return out


def report(out: dict[str, Any]) -> str:
    lines = [
        f"Engram auth benchmark -- {out['env'].get('postgres', '')}, {out['memories']:,} "
        f"memories, {out['requests']} requests per row and service, load average "
        f"{out['loadavg']:.2f}",
        "| request | auth off p50 / p95 ms | auth on p50 / p95 ms | auth adds (p50) |",
        "| --- | --- | --- | --- |",
    ]
    for what, r in out["results"].items():
        on, off = r["auth on"], r["auth off"]
        lines.append(f"| {what} | {off['p50']:.2f} / {off['p95']:.2f} | "
                     f"{on['p50']:.2f} / {on['p95']:.2f} | {on['p50'] - off['p50']:.2f} ms |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--seed", type=int, default=20261123)
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
