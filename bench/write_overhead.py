"""Write overhead of the term-statistics triggers: the same writes with them on and off.

Migration 0004 added three statement-level AFTER triggers on `memories`
(memories_term_stats_insert / _update / _delete) that append BM25 delta rows to
`term_stats` in the writer's transaction; app/search/term_stats.py folds them in the
background. This benchmark measures what they add to a write, as a before/after on one
database: every write below is timed with the three triggers enabled and with them
disabled (`ALTER TABLE memories DISABLE TRIGGER <name>`; the row-level `memories_tsv`
trigger of migration 0003 stays on throughout, it is not what is measured).

What it does (the default takes about 5-8 minutes on 2 shared cores, most of it the seed):

1. Starts a throwaway embedded PostgreSQL (deleted at the end), migrates it to head and
   seeds --rows rows (default 100k) for the default tenant with bench/search.py's `seed`:
   skewed users, MiniLM-derived vectors (the --base-sentences base embeddings are the
   ones bench/search.py caches in the git-ignored bench/results/search-base-*.npy; the
   model is loaded only when no cache exists), indexes (HNSW, GIN on tsv, btrees)
   rebuilt after the COPY, term_stats checked against the table and folded to one row
   per lexeme, VACUUM ANALYZE, pg_prewarm.

2. Measures, sequentially, the wall time of one transaction through the app's own code:
     insert 1 / 10 / 100   MemoryRepository(session, tenant).insert_many(rows), one
                           session per transaction from the app's sessionmaker (pool
                           checkout with pre-ping, BEGIN, INSERT, COMMIT), rows built by
                           app.memories.service._row_for as the service builds them;
                           text from bench/ingest.py's sentence generator, vectors
                           normalise(e_a + w*e_b + sigma*z) over the real base embeddings
                           (as the seed makes them), passed as list[float] as the
                           embedder returns them. Row building is outside the timing.
     archive 10            consolidation's archive statement
                           (app.consolidation.repository.GroupWriter.archive: UPDATE ...
                           SET archived_at = now() ...) for 10 active rows of one small
                           user, in one asyncpg transaction on a held connection, as a
                           consolidation run sends it.
     delete 10             DELETE FROM memories WHERE tenant_id = ... AND id IN (10 active
                           rows of one small user), one SQLAlchemy session and statement.
   In --rounds rounds (default 5); in each round every op runs once with the triggers on
   and once off, the order alternating between ops and between rounds (on/off, off/on,
   ...) so a change of load on the machine or a drift of the table hits both alike.
   Each (op, state) cell runs --warmup untimed transactions after the toggle, then the
   --reps timed ones. After every "on" cell the delta rows it appended are counted (rows
   per transaction, and trigger firings per transaction = corpus rows, lexeme '') and one
   fold (app.search.term_stats.fold_term_stats, its own transaction) is timed -- the
   service folds every few seconds, so each cell starts from a folded table. An "off"
   cell must append no delta rows (checked). Archive/delete targets are distinct seeded
   rows with no expiry.

3. Prints markdown tables -- p50/p95 ms per transaction and rows/s for each op with the
   triggers on and off, the difference (ms and %, overall and per round), delta rows and
   firings per transaction, the folds -- and writes JSON to
   bench/results/write-overhead-<time>.json (git-ignored). The triggers are enabled
   again at the end whatever happens (the "off" writes leave term_stats out of step with
   the table; the database is thrown away).

Run:   .venv/bin/python bench/write_overhead.py            (100k rows, 5 rounds)
       .venv/bin/python bench/write_overhead.py --quick    (10k rows, 2 rounds, ~1 minute)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime as dt
import gc
import hashlib
import os
import random
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import ingest as ing  # noqa: E402  (bench/ingest.py: generator, helpers, process control)
import search as sb  # noqa: E402  (bench/search.py: the seed)

DIM = ing.DIM
log = ing.log
pct = ing.pct
fmt = ing.fmt
table = ing.table

TRIGGERS = (
    "memories_term_stats_insert",
    "memories_term_stats_update",
    "memories_term_stats_delete",
)
# (name, rows per transaction), in the order --reps lists them.
OPS = (
    ("insert_1", 1),
    ("insert_10", 10),
    ("insert_100", 100),
    ("archive_10", 10),
    ("delete_10", 10),
)
STATES = ("on", "off")


# --------------------------------------------------------------------------- helpers


async def set_triggers(conn: Any, on: bool) -> None:
    verb = "ENABLE" if on else "DISABLE"
    await conn.execute("ALTER TABLE memories " + ", ".join(f"{verb} TRIGGER {t}" for t in TRIGGERS))
    states = {
        r["tgname"]: r["tgenabled"]
        for r in await conn.fetch(
            "SELECT tgname, tgenabled::text AS tgenabled FROM pg_trigger "
            "WHERE tgrelid = 'memories'::regclass"
        )
    }
    want = "O" if on else "D"
    if any(states.get(t) != want for t in TRIGGERS) or states.get("memories_tsv") != "O":
        raise RuntimeError(f"trigger states after {verb}: {states}")


async def unfolded(conn: Any) -> tuple[int, int]:
    """Unfolded term_stats rows, and of them corpus rows (lexeme ''): one per firing of a
    trigger that saw active rows."""
    r = await conn.fetchrow(
        "SELECT count(*) AS n, count(*) FILTER (WHERE lexeme = '') AS fires "
        "FROM term_stats WHERE NOT folded"
    )
    return int(r["n"]), int(r["fires"])


@dataclasses.dataclass
class Workload:
    """What the timed transactions write: fresh rows, and seeded rows to archive/delete."""

    base: np.ndarray
    rng: np.random.Generator
    pyrng: random.Random
    users: list[str]  # insert targets
    targets: dict[str, list[uuid.UUID]]  # small user -> active seeded rows not yet used

    def insert_rows(self, n: int) -> list[dict[str, Any]]:
        from app.memories.schemas import MemoryCreate
        from app.memories.service import _row_for

        a = self.rng.integers(len(self.base), size=n)
        b = self.rng.integers(len(self.base), size=n)
        w = self.rng.uniform(0.0, 0.5, n).astype(np.float32)[:, None]
        sigma = self.rng.uniform(0.015, 0.035, n).astype(np.float32)[:, None]
        noise = self.rng.standard_normal((n, DIM), dtype=np.float32)
        vecs = ing.normalise(self.base[a] + w * self.base[b] + sigma * noise)
        now = dt.datetime.now(dt.UTC)
        rows = []
        for v in vecs:
            uid = self.pyrng.choice(self.users)
            # scope_of only reads .pyrng
            scope = ing.scope_of(
                self,  # type: ignore[arg-type]
                int(uid.rsplit("-", 1)[1]),
                self.pyrng.randint(0, 2000),
            )
            item = MemoryCreate(content=ing.make_sentence(self.pyrng), **scope)
            rows.append(_row_for(item, v.tolist(), now))
        return rows

    def take(self, n: int) -> list[uuid.UUID]:
        """n active rows of one user, never handed out before."""
        users = [u for u, ids in self.targets.items() if len(ids) >= n]
        if not users:
            raise RuntimeError("ran out of seeded rows to archive/delete; seed more --rows")
        ids = self.targets[self.pyrng.choice(users)]
        out = ids[-n:]
        del ids[-n:]
        return out


# --------------------------------------------------------------------------- measuring


async def measure(
    args: argparse.Namespace,
    url: str,
    pm_pid: int,
    seeded: dict[str, Any],
    base: np.ndarray,
    tenant: uuid.UUID,
) -> dict[str, Any]:
    from sqlalchemy import delete

    from app.consolidation.repository import GroupWriter
    from app.db import create_engine, create_sessionmaker
    from app.memories.repository import MemoryRepository
    from app.models import Memory
    from app.search.term_stats import fold_term_stats
    from app.settings import Settings

    out: dict[str, Any] = {"cells": [], "folds": []}
    engine = create_engine(url, Settings(database_url=url, _env_file=None))
    maker = create_sessionmaker(engine)
    admin = await ing.connect(url)
    probe = ing.CpuProbe(pm_pid, None)
    try:
        small = list(seeded["small_users"])
        rows = await admin.fetch(
            """SELECT user_id, array_agg(id ORDER BY id) AS ids FROM memories
               WHERE tenant_id = $1 AND user_id = ANY($2::text[]) AND archived_at IS NULL
                 AND expires_at IS NULL
               GROUP BY user_id""",
            tenant,
            small,
        )
        pyrng = random.Random(args.seed + 900)
        targets: dict[str, list[uuid.UUID]] = {}
        for r in rows:
            ids = list(r["ids"])
            pyrng.shuffle(ids)
            targets[r["user_id"]] = ids
        work = Workload(
            base=base,
            rng=np.random.default_rng(args.seed + 901),
            pyrng=pyrng,
            users=[*small, seeded["large_user"]],
            targets=targets,
        )
        reps = dict(zip((o for o, _ in OPS), args.reps, strict=True))
        need = sum(
            args.rounds * 2 * (reps[o] + args.warmup) * n
            for o, n in OPS
            if not o.startswith("insert")
        )
        have = sum(len(v) // 10 * 10 for v in targets.values())
        if need > have:
            raise RuntimeError(f"archive/delete need {need} seeded rows, {have} available")
        out["archive_delete_rows_available"] = have

        async def insert_tx(n: int) -> Callable[[], Awaitable[None]]:
            batch = work.insert_rows(n)

            async def tx() -> None:
                async with maker() as session, session.begin():
                    await MemoryRepository(session, tenant).insert_many(batch)

            return tx

        held: dict[str, Any] = {}

        async def archive_tx(n: int) -> Callable[[], Awaitable[None]]:
            ids = work.take(n)
            run_id = uuid.uuid4()

            async def tx() -> None:
                raw = held["raw"]
                async with raw.transaction():
                    done = await GroupWriter(raw, tenant).archive(ids, run_id)
                if done != n:
                    raise RuntimeError(f"archived {done} rows, expected {n}")

            return tx

        async def delete_tx(n: int) -> Callable[[], Awaitable[None]]:
            ids = work.take(n)

            async def tx() -> None:
                async with maker() as session, session.begin():
                    res = await session.execute(
                        delete(Memory).where(Memory.tenant_id == tenant, Memory.id.in_(ids))
                    )
                if res.rowcount != n:  # type: ignore[attr-defined]
                    raise RuntimeError(f"deleted {res.rowcount} rows, expected {n}")  # type: ignore[attr-defined]

            return tx

        makers = {"insert": insert_tx, "archive": archive_tx, "delete": delete_tx}

        async def fold() -> dict[str, Any]:
            t = time.perf_counter()
            async with maker() as session, session.begin():
                moved = await fold_term_stats(session)
            return {"moved": moved, "ms": (time.perf_counter() - t) * 1000}

        state_now: bool | None = None
        for rnd in range(args.rounds):
            for k, (op, n) in enumerate(OPS):
                order = STATES if (rnd + k) % 2 == 0 else STATES[::-1]
                for state in order:
                    on = state == "on"
                    if on != state_now:
                        await set_triggers(admin, on)
                        state_now = on
                    make = makers[op.split("_")[0]]
                    async with contextlib.AsyncExitStack() as stack:
                        if op.startswith("archive"):  # a consolidation run holds its connection
                            conn = await stack.enter_async_context(engine.connect())
                            held["raw"] = (await conn.get_raw_connection()).driver_connection
                            stack.callback(held.pop, "raw", None)
                        snap0 = probe.snap()
                        for _ in range(args.warmup):
                            await (await make(n))()
                        n0, f0 = await unfolded(admin)
                        times: list[float] = []
                        for _ in range(reps[op]):
                            tx = await make(n)
                            t = time.perf_counter()
                            await tx()
                            times.append((time.perf_counter() - t) * 1000)
                        n1, f1 = await unfolded(admin)
                        cpu = ing.CpuProbe.delta(snap0, probe.snap())
                    cell: dict[str, Any] = {
                        "round": rnd,
                        "op": op,
                        "state": state,
                        "rows_per_tx": n,
                        "times_ms": times,
                        "delta_rows": n1 - n0,
                        "fires": f1 - f0,
                        "cpu": cpu,
                    }
                    if on:
                        cell["unfolded_before_fold"] = n1
                        cell["fold"] = await fold()
                        out["folds"].append({"round": rnd, "op": op, **cell["fold"]})
                    elif n1 != n0:
                        raise RuntimeError(
                            f"{op} with the triggers disabled appended {n1 - n0} term_stats rows"
                        )
                    out["cells"].append(cell)
                    log(
                        f"round {rnd + 1}/{args.rounds} {op:<10} {state:<3}: p50 "
                        f"{pct(times, 50):6.2f} ms, p95 {pct(times, 95):6.2f} ms"
                        + (
                            f"; {(n1 - n0) / len(times):,.0f} delta rows/tx, fold "
                            f"{cell['fold']['moved']:,} rows in {cell['fold']['ms']:.1f} ms"
                            if on
                            else ""
                        )
                    )
                gc.collect()
        # A last fold at the end of the writes: nothing should be left.
        await set_triggers(admin, True)
        out["final_fold"] = await fold()
    finally:
        try:
            await set_triggers(admin, True)
            out["triggers_enabled_at_end"] = True
        except Exception as exc:  # reported, the database is thrown away anyway
            out["triggers_enabled_at_end"] = f"failed: {exc!r}"
            log(f"could not re-enable the triggers: {exc!r}")
        await admin.close()
        await engine.dispose()
    out["summary"] = summarize(out["cells"], args.rounds)
    return out


def summarize(cells: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for op, n in OPS:
        s: dict[str, Any] = {"rows_per_tx": n}
        for state in STATES:
            mine = [c for c in cells if c["op"] == op and c["state"] == state]
            times = [t for c in mine for t in c["times_ms"]]
            wall = sum(c["cpu"]["wall_s"] for c in mine)
            s[state] = {
                "n": len(times),
                "p50": pct(times, 50),
                "p95": pct(times, 95),
                "mean": statistics.fmean(times),
                "rows_per_s": n * len(times) / (sum(times) / 1000),
                "delta_rows_per_tx": sum(c["delta_rows"] for c in mine) / len(times),
                "fires_per_tx": sum(c["fires"] for c in mine) / len(times),
                "other_cores": sum(c["cpu"]["other_cpu_s"] for c in mine) / wall,
                "pg_cores": sum(c["cpu"]["pg_cpu_s"] for c in mine) / wall,
                "bench_cores": sum(c["cpu"]["bench_cpu_s"] for c in mine) / wall,
            }
        on, off = s["on"], s["off"]
        s["diff_p50_ms"] = on["p50"] - off["p50"]
        s["diff_p50_pct"] = 100 * (on["p50"] / off["p50"] - 1)
        s["diff_p95_ms"] = on["p95"] - off["p95"]
        s["diff_mean_ms"] = on["mean"] - off["mean"]
        s["diff_mean_pct"] = 100 * (on["mean"] / off["mean"] - 1)
        s["diff_p50_by_round_ms"] = [
            pct(
                [
                    t
                    for c in cells
                    if (c["op"], c["state"], c["round"]) == (op, "on", r)
                    for t in c["times_ms"]
                ],
                50,
            )
            - pct(
                [
                    t
                    for c in cells
                    if (c["op"], c["state"], c["round"]) == (op, "off", r)
                    for t in c["times_ms"]
                ],
                50,
            )
            for r in range(rounds)
        ]
        folds = [c["fold"] for c in cells if c["op"] == op and c["state"] == "on"]
        txs = [len(c["times_ms"]) for c in cells if c["op"] == op and c["state"] == "on"]
        s["fold"] = {
            "folds": len(folds),
            "delta_rows_median": statistics.median(
                c["unfolded_before_fold"] for c in cells if c["op"] == op and c["state"] == "on"
            ),
            "moved_median": statistics.median(f["moved"] or 0 for f in folds),
            "ms_median": statistics.median(f["ms"] for f in folds),
            "ms_max": max(f["ms"] for f in folds),
            # The fold covers the cell's warm-up transactions too.
            "ms_per_write_tx": sum(f["ms"] for f in folds) / sum(txs),
        }
        out[op] = s
    return out


# --------------------------------------------------------------------------- report


def report(res: dict[str, Any]) -> str:
    out: list[str] = []
    env = res["env"]
    s = res["seed"]
    m = res["measure"]
    a = res["args"]
    out.append(
        f"Term-statistics trigger write overhead: {s['rows']:,} seeded rows, "
        f"{a['rounds']} rounds, warm-up {a['warmup']} tx per cell"
    )
    out.append(
        f"  {env['postgres']}, pgvector {env['pgvector']}, shared_buffers "
        f"{env['shared_buffers']}, synchronous_commit {env['synchronous_commit']}, fsync "
        f"{env['fsync']}; {env['cpus']} cpus, load {env['loadavg_start']} -> "
        f"{env.get('loadavg_end', '?')}; base vectors {res['base_source']}"
    )
    out.append("")
    out.append("Wall time per transaction, triggers on vs off (all rounds pooled)")
    rows = []
    for op, _n in OPS:
        x = m["summary"][op]
        on, off = x["on"], x["off"]
        by_round = x["diff_p50_by_round_ms"]
        rows.append(
            [
                op.replace("_", " "),
                str(on["n"]),
                f"{on['p50']:.2f} / {on['p95']:.2f}",
                f"{off['p50']:.2f} / {off['p95']:.2f}",
                f"{x['diff_p50_ms']:+.2f}",
                f"{x['diff_p50_pct']:+.1f}%",
                f"{x['diff_mean_ms']:+.2f} ({x['diff_mean_pct']:+.1f}%)",
                f"{min(by_round):+.2f} .. {max(by_round):+.2f}",
                f"{on['rows_per_s']:,.0f} / {off['rows_per_s']:,.0f}",
            ]
        )
    out.append(
        table(
            [
                "op",
                "tx per state",
                "on p50 / p95 ms",
                "off p50 / p95 ms",
                "diff p50 ms",
                "diff p50 %",
                "diff mean ms (%)",
                "diff p50 per round",
                "rows/s on / off",
            ],
            rows,
        )
    )
    out.append(
        "  insert/delete: one app session (pool checkout + pre-ping, BEGIN, statement(s), "
        "COMMIT); archive: one asyncpg transaction on a held connection (as consolidation)."
    )
    out.append("")
    out.append("What the triggers write, and the background fold after each 'on' cell")
    rows = []
    for op, _n in OPS:
        x = m["summary"][op]
        f = x["fold"]
        rows.append(
            [
                op.replace("_", " "),
                f"{x['on']['delta_rows_per_tx']:,.1f}",
                f"{x['on']['fires_per_tx']:,.1f}",
                f"{f['delta_rows_median']:,.0f}",
                f"{f['moved_median']:,.0f}",
                f"{f['ms_median']:.1f} ({f['ms_max']:.1f})",
                f"{f['ms_per_write_tx']:.3f}",
            ]
        )
    out.append(
        table(
            [
                "op",
                "delta rows / tx",
                "trigger firings / tx",
                "delta rows per fold",
                "rows moved per fold",
                "fold ms median (max)",
                "fold ms per write tx",
            ],
            rows,
        )
    )
    out.append(
        "  firings = corpus rows (lexeme '') appended: one per statement that fired a "
        "trigger on active rows. rows moved = the delta rows plus the folded rows of the"
    )
    out.append(
        "  lexemes they touch (what fold_term_stats returns). Final fold after all writes: "
        f"{m['final_fold']['moved']} rows in {m['final_fold']['ms']:.1f} ms; triggers enabled "
        f"at the end: {m['triggers_enabled_at_end']}."
    )
    out.append("")
    out.append(
        "Machine load during the cells (cores busy: this process (SQLAlchemy, asyncpg, "
        "row building) / PostgreSQL / other processes)"
    )
    rows = []
    for op, _n in OPS:
        x = m["summary"][op]
        rows.append(
            [
                op.replace("_", " "),
                *(
                    f"{x[st]['bench_cores']:.2f} / {x[st]['pg_cores']:.2f} / "
                    f"{x[st]['other_cores']:.2f}"
                    for st in STATES
                ),
            ]
        )
    out.append(table(["op", "on", "off"], rows))
    return "\n".join(out)


# --------------------------------------------------------------------------- main


async def run(args: argparse.Namespace, cleanup: ing.Cleanup, res: dict[str, Any]) -> None:
    from app.models import DEFAULT_TENANT_ID

    url, pm_pid, _ = await ing.start_database(
        cleanup, "write-overhead", res["env"], ("shared_buffers", "synchronous_commit", "fsync")
    )

    base_texts = ing.make_sentences(args.seed, args.base_sentences)
    digest = hashlib.sha256("\n".join(base_texts).encode()).hexdigest()[:16]
    cache = BENCH / "results" / f"search-base-{digest}.npy"  # shared with bench/search.py
    t = time.perf_counter()
    if cache.exists() and not args.no_cache:
        base = np.load(cache)
        res["base_source"] = f"cached in {cache.name}"
    else:
        threads = 2 if os.getloadavg()[0] < 1.0 else 1
        model = await asyncio.to_thread(ing.load_model, threads)
        base = await asyncio.to_thread(ing.encode, model, base_texts)
        del model
        res["base_source"] = f"embedded now with MiniLM, {threads} torch thread(s)"
        if not args.no_cache:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.save(cache, base)
    log(
        f"{len(base_texts)} base embeddings: {res['base_source']} ({time.perf_counter() - t:.1f} s)"
    )

    seeded = await sb.seed(args, url, args.rows, base, base_texts, DEFAULT_TENANT_ID)
    conn = await ing.connect(url)
    try:
        idx = {
            r["indexname"]
            for r in await conn.fetch(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'memories'"
            )
        }
        missing = {ing.HNSW_INDEX, "ix_memories_tsv_scope"} - idx
        if missing:
            raise RuntimeError(f"indexes missing after the seed: {sorted(missing)}")
        dup = await conn.fetchval(
            "SELECT count(*) FROM (SELECT 1 FROM term_stats GROUP BY tenant_id, lexeme "
            "HAVING count(*) > 1) d"
        )
        if dup or await conn.fetchval("SELECT count(*) FROM term_stats WHERE NOT folded"):
            raise RuntimeError("term_stats is not folded to one row per lexeme after the seed")
    finally:
        await conn.close()
    res["seed"] = seeded
    log(
        f"seeded {seeded['count']:,} rows; {len(seeded['small_users'])} small users; "
        f"term_stats {seeded['term_stats']['folded_rows']:,} folded rows"
    )
    gc.collect()
    res["measure"] = await measure(args, url, pm_pid, seeded, base, DEFAULT_TENANT_ID)


FULL = {"rows": 100_000, "rounds": 5, "base_sentences": 4000}
QUICK = {"rows": 10_000, "rounds": 2, "base_sentences": 1000}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="smoke run: 10k rows, 2 rounds")
    p.add_argument("--rows", type=int, help="rows to seed (default 100000)")
    p.add_argument("--rounds", type=int, help="interleaved on/off rounds (default 5)")
    p.add_argument(
        "--reps",
        default="40,40,10,20,20",
        help="timed transactions per cell and round, for insert 1, insert 10, insert 100, "
        "archive 10, delete 10 (one number: the same for all; default 40,40,10,20,20)",
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed transactions per cell")
    p.add_argument("--base-sentences", type=int, help="sentences embedded with MiniLM")
    p.add_argument("--maintenance-work-mem", default="2GB")
    p.add_argument("--seed", type=int, default=20261121)
    p.add_argument("--no-cache", action="store_true", help="re-embed the base sentences")
    p.add_argument(
        "--json",
        default=None,
        help="results path (default bench/results/write-overhead-<time>.json; 'none')",
    )
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    reps = [int(x) for x in str(args.reps).split(",") if x.strip()]
    if len(reps) == 1:
        reps *= len(OPS)
    if len(reps) != len(OPS) or min(reps) < 1:
        p.error(f"--reps takes one number or {len(OPS)} comma-separated ones")
    args.reps = reps
    return args


def main(argv: Sequence[str] | None = None) -> int:
    return ing.run_main("write-overhead", parse_args(argv), argv, run, report,
                        stopping="the database")


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
