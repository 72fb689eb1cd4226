"""Re-embedding benchmark: how long `python -m app reembed` takes to move N memories to the
local model, against the floor of embedding the same texts alone.

What it does:

1. Starts a throwaway embedded PostgreSQL (deleted at the end), migrated to head, and
   inserts --rows memories (10-30-word sentences from bench/ingest.py's generator) with
   hash-embedder vectors, recorded as the hash embedder's: the database a service on
   the hash embedder leaves.
2. The floor E: the service's encoder (ONNX Runtime, the service's passes, every core, as
   the command runs it) embedding --floor-rows of the same texts alone, in batches of
   --batch-size, in sentences/s.
3. `app.embedding_space.service.reembed` with the local model, as the command runs it:
   memories/s over the whole pass, and the end's index build and vacuum apart.
4. Checks the outcome: the space recorded as the local model's, and a stored vector
   equal (within halfvec's precision) to the model's vector of its text.

Run:   .venv/bin/python bench/reembed.py                   (20k rows, ~4 min on 2 cores)
       .venv/bin/python bench/reembed.py --rows 2000       (quick)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
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


async def seed(url: str, texts: list[str]) -> None:
    from app.models import DEFAULT_TENANT_ID
    from app.models.vector import vector_text
    from app.providers.hash_embedder import HashEmbedder

    hashed = HashEmbedder(384)
    conn = await ing.connect(url)
    try:
        rows = [(DEFAULT_TENANT_ID, uuid.uuid4(), text, vector_text(hashed.embed_one(text)))
                for text in texts]
        await conn.executemany(
            "INSERT INTO memories (tenant_id, id, content, embedding) "
            "VALUES ($1, $2, $3, $4::halfvec)", rows)
        await conn.execute("VACUUM ANALYZE memories")
        await conn.execute("INSERT INTO embedding_space (model) VALUES ($1)",
                           HashEmbedder.vector_space)
    finally:
        await conn.close()


async def run(args: argparse.Namespace, cleanup: ing.Cleanup, res: dict[str, Any]) -> None:
    from app.db import create_engine
    from app.embedding_space.service import reembed
    from app.providers.local_embedder import LocalEmbedder
    from app.settings import Settings

    url, _, _ = await ing.start_database(cleanup, "reembed", res["env"],
                                     show=("shared_buffers", "maintenance_work_mem"))
    texts = ing.make_sentences(args.seed, args.rows)
    t = time.perf_counter()
    await seed(url, texts)
    ing.log(f"seeded {args.rows} memories with hash vectors in {time.perf_counter() - t:.1f} s")

    # As the command builds it: every core, the service's passes.
    model = LocalEmbedder(batch_size=args.batch_size, threads=args.threads)
    await model.load()
    try:
        sample = texts[:args.floor_rows]
        await model.embed(sample[:args.batch_size])  # warm
        t = time.perf_counter()
        for i in range(0, len(sample), args.batch_size):
            await model.embed(sample[i:i + args.batch_size])
        floor = len(sample) / (time.perf_counter() - t)
        res["floor_sentences_per_s"] = round(floor, 1)
        ing.log(f"E: the encoder alone, {len(sample)} texts in batches of {args.batch_size}: "
            f"{floor:.1f} sentences/s")

        engine = create_engine(url, Settings(database_url=url, _env_file=None),
                               application_name="engram-cli", bounded=False)
        try:
            report = await reembed(engine, model, batch_size=args.batch_size)
        finally:
            await engine.dispose()
        rate = report.embedded / report.seconds
        res["reembed"] = {
            "memories": report.embedded, "seconds": round(report.seconds, 1),
            "index_seconds": round(report.index_seconds, 1),
            "memories_per_s": round(rate, 1),
            "of_floor": round(rate / floor, 3),
        }
        ing.log(f"reembed: {report.embedded} memories in {report.seconds:.1f} s = {rate:.1f}/s "
            f"({rate / floor:.0%} of E), of which the index build and vacuum "
            f"{report.index_seconds:.1f} s")

        conn = await ing.connect(url)
        try:
            space = await conn.fetchval("SELECT model FROM embedding_space")
            stored = await conn.fetchval(
                "SELECT embedding::text FROM memories WHERE content = $1", texts[-1])
        finally:
            await conn.close()
        (expected,) = await model.embed([texts[-1]])
        got = np.array([float(x) for x in stored.strip("[]").split(",")])
        ok = space == LocalEmbedder.vector_space and np.allclose(got, expected, atol=2e-3)
        res["check"] = {"space": space, "vector_matches_model": bool(ok)}
        ing.log(f"check: space {space}, a stored vector equals the model's: {ok}")
        if not ok:
            raise SystemExit("the re-embedding's outcome is wrong")
    finally:
        await model.aclose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=20_000, help="memories (default 20000)")
    p.add_argument("--floor-rows", type=int, default=2_000,
                   help="texts for the encoder floor E (default 2000)")
    p.add_argument("--batch-size", type=int, default=256,
                   help="the command's batch, and the floor's (default 256)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                   help="the model's threads, as the command takes them (default: every core)")
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
