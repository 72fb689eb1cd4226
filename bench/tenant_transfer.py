"""Tenant export and import benchmark: how long `python -m app tenants export` and `import`
take for a tenant of N memories, against the floor of inserting the same rows alone.

What it does:

1. Starts a throwaway embedded PostgreSQL (deleted at the end) with two databases migrated
   to head, `engram` and `target`, the hash embedder's model recorded in both (the model's
   name is not what is measured).
2. The floor F: --rows memories (10-30-word sentences from bench/ingest.py's generator,
   MiniLM-like vectors: see `vectors`) inserted for one tenant of `engram` in batches of 500, with
   every index in place, as plain rows (asyncpg executemany; the HNSW insertion is most
   of it), plus --rows / 10 session turns and a history state for one memory in ten.
3. `export_tenant` of that tenant (rows/s, file size), `import_tenant` of the file into
   `target` as a new tenant, and `import_tenant --replace` over the tenant in `engram`
   itself (its rows deleted, then inserted again), as the command runs them.
4. Checks the outcome: the target holds every memory, with the same vectors.

Run:   .venv/bin/python bench/tenant_transfer.py                 (5k memories, ~2 min)
       .venv/bin/python bench/tenant_transfer.py --rows 20000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import ingest as ing  # noqa: E402  (bench/ingest.py: generator, database and process control)

BATCH = 500


def vectors(texts: list[str], base_count: int, seed: int) -> list[str]:
    """MiniLM-like vectors as halfvec text: --base-sentences of the texts embedded by the
    service's encoder, each row a noisy mix of two of them as bench/ingest.py makes them
    (HNSW's insertion cost depends on how the vectors cluster; hash vectors, sparse,
    insert ~5x faster than real ones)."""
    from app.models.vector import vector_text

    _, encoder = ing.load_service_encoder()
    base = encoder.encode(texts[:base_count])
    corpus = ing.make_corpus(base, len(texts), max(1, len(texts) // 500), seed)
    users = np.repeat(np.arange(corpus.users), corpus.sizes)
    return [vector_text(v) for v in corpus.vectors(users).tolist()]


async def seed(url: str, tenant: uuid.UUID, texts: list[str], embeddings: list[str]) -> float:
    """The tenant's rows inserted through every index; the seconds the memories took."""
    conn = await ing.connect(url)
    try:
        await conn.execute("INSERT INTO tenants (id, name) VALUES ($1, 'bench')", tenant)
        rows = [(tenant, uuid.uuid4(), text, vector)
                for text, vector in zip(texts, embeddings, strict=True)]
        t = time.perf_counter()
        for i in range(0, len(rows), BATCH):
            await conn.executemany(
                "INSERT INTO memories (tenant_id, id, content, embedding) "
                "VALUES ($1, $2, $3, $4::halfvec)", rows[i:i + BATCH])
        seconds = time.perf_counter() - t
        await conn.execute(
            "INSERT INTO sessions (tenant_id, session_id, strategy, turn_count) "
            "VALUES ($1, 's', 'none', $2)", tenant, len(texts) // 10)
        await conn.executemany(
            "INSERT INTO session_turns (tenant_id, session_id, seq, role, content, tokens) "
            "VALUES ($1, 's', $2, 'user', $3, 10)",
            [(tenant, i + 1, texts[i]) for i in range(len(texts) // 10)])
        await conn.execute(
            "UPDATE memories SET content = content || ' (edited)' WHERE tenant_id = $1 "
            "AND id IN (SELECT id FROM memories WHERE tenant_id = $1 ORDER BY id "
            "LIMIT $2)", tenant, len(texts) // 10)
        await conn.execute("VACUUM ANALYZE memories")
    finally:
        await conn.close()
    return seconds


async def run(args: argparse.Namespace, cleanup: ing.Cleanup, res: dict[str, Any]) -> None:
    from sqlalchemy import make_url

    from app.db import create_engine
    from app.migrate import upgrade_to_head
    from app.providers.hash_embedder import HashEmbedder
    from app.settings import Settings
    from app.tenants.transfer import export_tenant, import_tenant

    url, _, _ = await ing.start_database(cleanup, "transfer", res["env"])
    target = make_url(url).set(database="target").render_as_string(hide_password=False)
    conn = await ing.connect(url)
    try:
        await conn.execute("CREATE DATABASE target")
    finally:
        await conn.close()
    engines = {name: create_engine(u, Settings(database_url=u, _env_file=None),
                                   application_name="engram-cli", bounded=False)
               for name, u in (("source", url), ("target", target))}
    try:
        await upgrade_to_head(engines["target"])
        for u in (url, target):
            conn = await ing.connect(u)
            try:
                await conn.execute(
                    "INSERT INTO embedding_space (model) VALUES ($1) ON CONFLICT (singleton) "
                    "DO UPDATE SET model = EXCLUDED.model", HashEmbedder.vector_space)
            finally:
                await conn.close()
        tenant = uuid.uuid4()
        texts = ing.make_sentences(args.seed, args.rows)
        embeddings = await asyncio.to_thread(vectors, texts, args.base_sentences, args.seed)
        floor = args.rows / await seed(url, tenant, texts, embeddings)
        res["floor_rows_per_s"] = round(floor, 1)
        ing.log(f"F: {args.rows} memories inserted through every index: {floor:.1f} rows/s")

        with tempfile.TemporaryDirectory() as tmp:
            file = Path(tmp) / "bench.jsonl.gz"
            out = await export_tenant(engines["source"], "bench", file)
            into = await import_tenant(engines["target"], file)
            over = await import_tenant(engines["source"], file, replace=True)
        for name, report in (("export", out), ("import", into), ("import_replace", over)):
            rate = report.rows["memories"] / report.seconds
            res[name] = {"memories": report.rows["memories"],
                         "rows": sum(report.rows.values()),
                         "seconds": round(report.seconds, 2),
                         "memories_per_s": round(rate, 1),
                         "of_floor": round(rate / floor, 3),
                         "file_mb": round(report.size_bytes / 1e6, 2)}
            ing.log(f"{name}: {report.rows['memories']} memories ({sum(report.rows.values())} "
                    f"rows) in {report.seconds:.1f} s = {rate:.1f} memories/s "
                    f"({rate / floor:.0%} of F); file {report.size_bytes / 1e6:.1f} MB")

        check = "SELECT count(*), md5(string_agg(embedding::text, ',' ORDER BY id)) " \
                "FROM memories WHERE tenant_id = $1"
        got = {}
        for name, u in (("source", url), ("target", target)):
            conn = await ing.connect(u)
            try:
                got[name] = tuple(await conn.fetchrow(check, tenant))
            finally:
                await conn.close()
        ok = got["source"] == got["target"] and got["source"][0] == args.rows
        res["check"] = {"memories_and_vectors_equal": ok}
        ing.log(f"check: both databases hold the {args.rows} memories, the same vectors: {ok}")
        if not ok:
            raise SystemExit(f"the import's outcome is wrong: {got}")
    finally:
        for engine in engines.values():
            await engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--rows", type=int, default=5_000, help="memories (default 5000)")
    p.add_argument("--base-sentences", type=int, default=1_000,
                   help="texts embedded by the model, the rest mixes of them (default 1000)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args()
    res: dict[str, Any] = {"env": {"cpus": os.cpu_count()}, "args": vars(args) | {
        "json": str(args.json) if args.json else None}}
    cleanup = ing.Cleanup()
    try:
        asyncio.run(run(args, cleanup, res))
    finally:
        cleanup.run()
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
        ing.log(f"results written to {args.json}")


if __name__ == "__main__":
    main()
