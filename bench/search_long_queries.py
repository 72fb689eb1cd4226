"""Search with long queries: what a paragraph costs against a question.

bench/search.py asks questions of about ten words. An agent may search with a whole
message instead. This seeds the corpus of bench/search.py (one 100k tenant, skewed users;
its cached MiniLM base vectors) and, for queries of about 60, 500, 1,500 and 4,000
characters (words drawn from its questions, so every one matches the corpus), measures:
the query embedding alone on the encoder the service runs (one thread) and, for
reference, on two threads; the full-text statement alone (SearchRepository, as the service
runs it; its work grows with the query's distinct lexemes); and POST /v1/search through
the real server (local model, lean client), tenant-wide and for the 10k-row user.

all-MiniLM-L6-v2 reads at most 256 word pieces, so the embedding stops growing around
1,200 characters of English.

Run: `HF_HUB_OFFLINE=1 .venv/bin/python bench/search_long_queries.py` (about 1.5 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
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

LENGTHS = (60, 500, 1500, 4000)


def long_queries(questions: list[str], length: int, n: int, seed: int) -> list[str]:
    """`n` queries of about `length` characters, of words from the questions."""
    words = " ".join(questions).split()
    rng = random.Random(seed + length)
    out = []
    for _ in range(n):
        picked: list[str] = []
        size = -1
        while size < length:
            word = rng.choice(words)
            picked.append(word)
            size += len(word) + 1
        out.append(" ".join(picked))
    return out


async def run(args: argparse.Namespace, cleanup: ing.Cleanup, res: dict[str, Any]) -> None:
    from app.models import DEFAULT_TENANT_ID
    from app.providers.sentence_encoder import load_encoder
    from app.search.repository import SearchFilter

    url, _, tmp = await ing.start_database(cleanup, "search-long", res["env"])
    sargs = sb.parse_args(["--rows", str(args.rows), "--seed", str(args.seed)])
    base_texts, base, _ = await sb.base_embeddings(sargs.seed, sargs.base_sentences)
    seeded = await sb.seed(sargs, url, args.rows, base, base_texts, DEFAULT_TENANT_ID)
    questions = sb.make_questions(args.seed + 500, 200)

    runtime, one = await asyncio.to_thread(ing.load_service_encoder)
    two = await asyncio.to_thread(load_encoder, runtime, threads=2, batch_size=ing.SERVICE_BATCH,
                                  cache_dir=ing.model_cache_dir())
    service = await sb.open_service(cleanup, url, tmp)
    repo, limits = service.repo, service.limits

    scopes = {"tenant-wide": {}, "10k-row user": {"user_id": seeded["large_user"]}}
    n = args.queries
    rows: list[dict[str, Any]] = []
    client = LeanHttp(service.port)
    try:
        for length in LENGTHS:
            queries = long_queries(questions, length, n, args.seed)

            # On a thread, as the service runs the model; the loop only waits.
            embed_1, _ = await sb.timed(n, lambda i, qs=queries: asyncio.to_thread(
                encode_sync, one, qs[i]))
            embed_2, _ = await sb.timed(n, lambda i, qs=queries: asyncio.to_thread(
                encode_sync, two, qs[i]))
            row: dict[str, Any] = {
                "length": length, "chars": sum(map(len, queries)) / n,
                "embed_1": embed_1, "embed_2": embed_2, "text": {}, "http": {},
            }
            for name, fields in scopes.items():
                filters = SearchFilter(**fields)
                row["text"][name], _ = await sb.timed(n, lambda i, f=filters, qs=queries:
                                                     repo.text_matches(qs[i], f, limits))

                async def search(i: int, fields: dict[str, Any] = fields,
                                 qs: list[str] = queries) -> None:
                    status, body = await client.request(
                        "POST", "/v1/search", {"query": qs[i], "top_k": 10, **fields})
                    if status != 200:
                        raise RuntimeError(f"search -> {status}: {body[:300]!r}")

                await sb.timed(min(n, 3), search)
                row["http"][name], _ = await sb.timed(n, search)
            rows.append(row)
            ing.log(f"{length} chars: embed p50 {ing.pct(embed_1, 50):.1f} ms, HTTP p50 "
                    + ", ".join(f"{k} {ing.pct(v, 50):.1f} ms" for k, v in row["http"].items()))
    finally:
        await client.close()
        await service.close()
    res["rows"] = rows


def encode_sync(encoder: Any, text: str) -> None:
    encoder.encode([text])


def report(res: dict[str, Any]) -> str:
    a = res["args"]
    lines = [
        f"Long queries -- {res['env'].get('postgres')}, pgvector {res['env'].get('pgvector')}, "
        f"{a['rows']:,} memories in one tenant, {a['queries']} queries per length, p50 / p95 ms",
        "",
        "| query chars | embed, 1 thread (the service) | embed, 2 threads | text SQL tenant-wide "
        "| text SQL 10k user | HTTP tenant-wide (lean) | HTTP 10k user (lean) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]

    def pp(times: list[float]) -> str:
        return f"{ing.pct(times, 50):.1f} / {ing.pct(times, 95):.1f}"

    for r in res["rows"]:
        lines.append(
            f"| {r['chars']:.0f} | {pp(r['embed_1'])} | {pp(r['embed_2'])} | "
            f"{pp(r['text']['tenant-wide'])} | {pp(r['text']['10k-row user'])} | "
            f"{pp(r['http']['tenant-wide'])} | {pp(r['http']['10k-row user'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--json", default=None,
                        help="results path (default bench/results/search-long-<time>.json; "
                        "'none')")
    args = parser.parse_args(argv)
    return ing.run_main("search-long", args, argv, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
