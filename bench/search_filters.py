"""Search with tag, category, creation-window and metadata filters in a large tenant: what
each filter costs, and whether the exact/HNSW choice suits it.

bench/search.py measures unscoped and user-scoped searches. Tags and categories are
filters too, and two things differ for them: a scope column's rows are counted on its
btree for the exact/HNSW choice (app/search/vector_path.py), a tag's or category's are
not (only "under `exact_below` or not", through the filter itself); and the full-text
statement finds a large scope's rare-term rows through an index keyed by tenant and user
only, then reads each row to check the filter.

Seeds the corpus of bench/search.py (one tenant, skewed users; its cached MiniLM base
vectors), then gives rows extra tags of known shares (`pct4`, `pct1`, `rows30`) beside
the seeded ones (eight tags of ~18% each, six categories of ~17%), metadata `{"doc": ...}`
of known shares (`doc-pct4`, `doc-rows30`), and moves 3,000 rows of
the second-largest user to a user of their own: a scope over `exact_below` whose rows are
counted, so the text statement sizes a term's rows in it by the user's share of the
tenant (a 1M-row tenant's common words would otherwise find nothing for any user).
The creation windows and metadata are plain filters on the scope's rows (no index serves
them in the search): a narrow one in a large scope reads much of the scope to count it.
For each filter class: the text and vector statements one after the other on the
service's own pool (SearchRepository, as the service runs them; no embedding), the
vector statement once more forced onto each branch (exact, HNSW) with how much of the
exact top list HNSW found, and POST /v1/search through the real server (local model,
lean client).

With `--other-tenants N`, N tenants of 5 rows each (copies of seeded rows, tags included)
are added beside it and the table analysed: the statistics of a shared table, in which a
generic plan takes one tenant for a sliver of it.

Run: `HF_HUB_OFFLINE=1 .venv/bin/python bench/search_filters.py [--other-tenants 1000]`
(about 3 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
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

# Extra tags: name -> share of the table's rows (rows30: a fixed 30 rows).
EXTRA_TAGS = {"pct4": 0.04, "pct1": 0.015, "rows30": 30}
# Metadata `{"doc": name}` on rows of these shares, as the tags.
EXTRA_DOCS = {"doc-pct4": 0.04, "doc-rows30": 30}
# A user between exact_below and the exact/HNSW crossover (~4,200 rows at 100k), which the
# seeded layout has none of: its rows are taken from the second-largest user.
MID_USER, MID_USER_ROWS = "user-mid", 3000


def classes(large_user: str) -> dict[str, dict[str, Any]]:
    """Filter class -> the request's filter fields (JSON: a moment as RFC 3339 text). The
    seeded rows' creation times are spread evenly over the year before the run."""
    now = datetime.now(UTC)

    def ago(days: float) -> str:
        return (now - timedelta(days=days)).isoformat()

    return {
        "none": {},
        "tag 18%": {"tags": ["travel"]},
        "tag 4%": {"tags": ["pct4"]},
        "tag 1.5%": {"tags": ["pct1"]},
        "tag 30 rows": {"tags": ["rows30"]},
        "two tags 3%": {"tags": ["travel", "urgent"]},
        "category 17%": {"categories": ["event"]},
        "two categories 33%": {"categories": ["event", "task"]},
        "large user + category 2%": {"user_id": large_user, "categories": ["event"]},
        "category + tag 3%": {"categories": ["event"], "tags": ["travel"]},
        "large user + tag 18%": {"user_id": large_user, "tags": ["travel"]},
        f"user of {MID_USER_ROWS:,} rows": {"user_id": MID_USER},
        "created in the last 30 days 8%": {"created_after": ago(30)},
        "created on one day 0.3%": {"created_after": ago(101), "created_before": ago(100)},
        "large user + created in 30 days": {"user_id": large_user, "created_after": ago(30)},
        "metadata 4%": {"metadata": {"doc": "doc-pct4"}},
        "metadata 30 rows": {"metadata": {"doc": "doc-rows30"}},
        "large user + metadata 4%": {"user_id": large_user, "metadata": {"doc": "doc-pct4"}},
    }


def search_filter(fields: dict[str, Any]) -> Any:
    """The request's filter fields as the repository takes them."""
    from app.search.repository import SearchFilter

    return SearchFilter(**{k: datetime.fromisoformat(v) if k.startswith("created_") else v
                           for k, v in fields.items()})


async def add_tags(url: str, rows: int) -> dict[str, int]:
    """The extra tags on pseudo-randomly chosen rows (each its own order), and the mid-sized
    user; rows per tag."""
    conn = await ing.connect(url)
    try:
        for tag, share in EXTRA_TAGS.items():
            n = int(share) if share >= 1 else int(rows * share)
            await conn.execute(
                "UPDATE memories SET tags = tags || ARRAY[$1]::text[] WHERE id IN ("
                " SELECT id FROM memories ORDER BY md5(id::text || $1) LIMIT $2)", tag, n)
        for doc, share in EXTRA_DOCS.items():
            n = int(share) if share >= 1 else int(rows * share)
            await conn.execute(
                "UPDATE memories SET metadata = metadata || jsonb_build_object('doc', $1::text)"
                " WHERE id IN (SELECT id FROM memories ORDER BY md5(id::text || $1) LIMIT $2)",
                doc, n)
        await conn.execute(
            "UPDATE memories SET user_id = $1 WHERE id IN (SELECT id FROM memories"
            " WHERE user_id = (SELECT user_id FROM memories GROUP BY user_id"
            " ORDER BY count(*) DESC OFFSET 1 LIMIT 1) ORDER BY md5(id::text) LIMIT $2)",
            MID_USER, MID_USER_ROWS)
        await conn.execute("VACUUM ANALYZE memories")
        counted = await conn.fetch(
            "SELECT t, count(*) AS n FROM memories, unnest(tags) t GROUP BY t")
        return {r["t"]: int(r["n"]) for r in counted}
    finally:
        await conn.close()


async def add_tenants(url: str, tenants: int, rows_each: int) -> int:
    """`tenants` more tenants of `rows_each` rows, copies of the seeded tenant's rows (tags
    and categories too), then ANALYZE: a table of many tenants, whose statistics make one
    tenant a sliver of it in a generic plan. Returns the table's rows."""
    conn = await ing.connect(url)
    try:
        await conn.execute(
            "INSERT INTO tenants (id, name) SELECT gen_random_uuid(), 'other-' || g"
            " FROM generate_series(1, $1) g", tenants)
        await conn.execute(
            "INSERT INTO memories (tenant_id, id, content, user_id, category, tags, importance,"
            " embedding) SELECT t.id, gen_random_uuid(), s.content, s.user_id, s.category,"
            " s.tags, s.importance, s.embedding"
            " FROM (SELECT id, row_number() OVER (ORDER BY id) AS k FROM tenants"
            "       WHERE name LIKE 'other-%') t"
            " CROSS JOIN generate_series(0, $1 - 1) j"
            " JOIN (SELECT *, row_number() OVER (ORDER BY id) AS rn FROM memories) s"
            "   ON s.rn = (t.k * $1 + j) % (SELECT count(*) FROM memories) + 1", rows_each)
        await conn.execute("VACUUM ANALYZE memories")
        return int(await conn.fetchval("SELECT count(*) FROM memories"))
    finally:
        await conn.close()


def p(values: list[float], q: float) -> str:
    return f"{ing.pct(values, q):.2f}"


async def run(args: argparse.Namespace, cleanup: ing.Cleanup, res: dict[str, Any]) -> None:
    from app.models import DEFAULT_TENANT_ID

    url, _, tmp = await ing.start_database(cleanup, "search-filters", res["env"])
    sargs = sb.parse_args(["--rows", str(args.rows), "--seed", str(args.seed)])
    base_texts, base, _ = await sb.base_embeddings(sargs.seed, sargs.base_sentences)
    seeded = await sb.seed(sargs, url, args.rows, base, base_texts, DEFAULT_TENANT_ID)
    t = time.perf_counter()
    tag_rows = await add_tags(url, args.rows)
    ing.log(f"extra tags in {time.perf_counter() - t:.1f} s: "
            + ", ".join(f"{k} {tag_rows[k]:,}" for k in EXTRA_TAGS))
    if args.other_tenants:
        t = time.perf_counter()
        total = await add_tenants(url, args.other_tenants, 5)
        ing.log(f"{args.other_tenants:,} other tenants of 5 rows in "
                f"{time.perf_counter() - t:.1f} s; {total:,} rows in the table")

    questions = sb.make_questions(args.seed + 500, args.queries)
    _, encoder = await asyncio.to_thread(ing.load_service_encoder)
    vectors = [v.tolist() for v in encoder.encode(questions)]

    service = await sb.open_service(cleanup, url, tmp)
    repo, limits, port = service.repo, service.limits, service.port

    rows_out: list[dict[str, Any]] = []
    n = args.queries
    try:
        for name, fields in classes(seeded["large_user"]).items():
            filters = search_filter(fields)
            text_t, texts = await sb.timed(n, lambda i, f=filters: repo.text_matches(
                questions[i], f, limits))

            def vector(mode: str | None, f: Any = filters,
                       texts: list[Any] = texts) -> Callable[[int], Any]:
                async def call(i: int) -> Any:
                    text = texts[i] if mode is None else dataclasses.replace(
                        texts[i], small=mode == "exact", scope_rows=float("inf"))
                    rows = await repo.candidates(text, vectors[i], f, limits, 10)
                    return {r.memory_id for r in rows if r.vector_rank is not None}
                return call

            vec_t, _ = await sb.timed(n, vector(None))
            exact_t, exact_ids = await sb.timed(n, vector("exact"))
            hnsw_t, hnsw_ids = await sb.timed(n, vector("hnsw"))
            found = statistics.mean(
                len(h & e) / len(e) for h, e in zip(hnsw_ids, exact_ids, strict=True) if e)

            # A fresh connection per class: the SQL timings outlast uvicorn's keep-alive.
            client = LeanHttp(port)

            async def http_call(i: int, fields: dict[str, Any] = fields,
                                client: LeanHttp = client) -> Any:
                status, body = await client.request(
                    "POST", "/v1/search", {"query": questions[i], "top_k": 10, **fields})
                if status != 200:
                    raise RuntimeError(f"search -> {status}: {body[:300]!r}")

            await sb.timed(min(n, args.warmup), http_call)
            http_t, _ = await sb.timed(n, http_call)
            await client.close()
            small = sum(t.small for t in texts)
            rows_out.append({
                "class": name, "text": text_t, "vector": vec_t, "exact": exact_t,
                "hnsw": hnsw_t, "found": found, "small": small, "http": http_t,
                "no_text": sum(not t.ids for t in texts),
            })
            ing.log(f"{name}: HTTP p50 {p(http_t, 50)} ms")
    finally:
        await service.close()
    res["tag_rows"] = tag_rows
    res["classes"] = rows_out


def report(res: dict[str, Any]) -> str:
    tags = res["tag_rows"]
    lines = [
        f"Filtered search -- {res['env'].get('postgres')}, pgvector {res['env'].get('pgvector')}, "
        f"{res['args']['rows']:,} memories in one tenant"
        + (f" beside {res['args']['other_tenants']:,} tenants of 5 rows"
           if res["args"].get("other_tenants") else "")
        + f", {res['args']['queries']} queries per class, sequential",
        "  extra tags (rows): " + ", ".join(f"{k} {tags[k]:,}" for k in EXTRA_TAGS)
        + f"; seeded tags ~{tags.get('travel', 0):,} rows each",
        "",
        "| filter | small scope | no text candidates | text SQL p50/p95 | vector SQL p50/p95 "
        "(the service's choice) | exact p50/p95 | HNSW p50/p95 | HNSW found of exact top 20 "
        "| HTTP p50/p95 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in res["classes"]:
        lines.append(
            f"| {r['class']} | {r['small']}/{len(r['text'])} | {r.get('no_text', '-')} | "
            f"{p(r['text'], 50)} / "
            f"{p(r['text'], 95)} | {p(r['vector'], 50)} / {p(r['vector'], 95)} | "
            f"{p(r['exact'], 50)} / {p(r['exact'], 95)} | {p(r['hnsw'], 50)} / "
            f"{p(r['hnsw'], 95)} | {r['found']:.2f} | {p(r['http'], 50)} / "
            f"{p(r['http'], 95)} |")
    lines += [
        "  ms. text and vector SQL: SearchRepository.text_matches and .candidates, one round trip",
        "  each on the service's search pool (the vector statement's choice is the service's:",
        "  exact for a small scope or a scope column under the crossover, else HNSW; a short HNSW",
        "  answer re-runs exact). exact / HNSW: the vector statement forced onto that branch (a",
        "  short HNSW answer re-run exact, as the service does).",
        "  small scope: queries whose filtered scope was under exact_below. no text candidates:",
        "  queries whose full-text list came back empty.",
        "  HTTP: POST /v1/search",
        "  through the service (local model), a lean keep-alive client.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seed", type=int, default=20261121)
    parser.add_argument("--other-tenants", type=int, default=0,
                        help="add this many 5-row tenants (copies of seeded rows) beside "
                        "the measured one")
    parser.add_argument("--json", default=None,
                        help="results path (default bench/results/search-filters-<time>.json; "
                        "'none')")
    args = parser.parse_args(argv)
    return ing.run_main("search-filters", args, argv, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
