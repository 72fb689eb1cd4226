"""`python -m app serve` with timing hooks, for `bench/ingest.py --profile`.

Runs the unmodified service (same settings, same code path) but wraps, at import time:

* the ASGI app: server-side wall time of every request (from first byte handed to the
  app to the last byte of the answer),
* `Embedder.embed` of the local and hash embedders: what the request waits for its
  vectors (for `local` this includes the micro-batcher's queue and the thread hand-off),
* `LocalEmbedder._encode`: the model's forward pass alone, on the embedder thread,
* `MemoryRepository.insert_many`: the INSERT round trip (PostgreSQL's index maintenance
  happens here),
* `AsyncSession.commit`: the COMMIT round trip (WAL flush).

Each call costs two clock reads and one list append. On exit (SIGINT/SIGTERM make
uvicorn shut down cleanly) the records are written as JSON to
`$ENGRAM_BENCH_PROFILE_OUT`; the benchmark splits them by its own phase time windows.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

# (kind, wall-clock start in seconds since the epoch, duration in seconds, items)
RECORDS: list[tuple[str, float, float, int]] = []


def _wrap_async(
    kind: str, fn: Callable[..., Awaitable[Any]], count: Callable[[tuple[Any, ...]], int]
) -> Callable[..., Awaitable[Any]]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, start = time.time(), time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            RECORDS.append((kind, wall, time.perf_counter() - start, count(args)))

    return wrapper


def _wrap_sync(
    kind: str, fn: Callable[..., Any], count: Callable[[tuple[Any, ...]], int]
) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, start = time.time(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            # list.append is atomic under the GIL; this runs on the embedder thread.
            RECORDS.append((kind, wall, time.perf_counter() - start, count(args)))

    return wrapper


def _second_len(args: tuple[Any, ...]) -> int:
    return len(args[1]) if len(args) > 1 else 0


def install() -> None:
    from sqlalchemy.ext.asyncio import AsyncSession

    import app.main
    from app.memories.repository import MemoryRepository
    from app.providers.hash_embedder import HashEmbedder
    from app.providers.local_embedder import LocalEmbedder

    # (target, attribute, wrapped) -- patched by name so one table lists every hook.
    hooks: list[tuple[Any, str, Any]] = [
        (
            MemoryRepository,
            "insert_many",
            _wrap_async("insert", MemoryRepository.insert_many, _second_len),
        ),
        (AsyncSession, "commit", _wrap_async("commit", AsyncSession.commit, lambda _a: 0)),
        (LocalEmbedder, "embed", _wrap_async("embed", LocalEmbedder.embed, _second_len)),
        (LocalEmbedder, "_encode", _wrap_sync("encode", LocalEmbedder._encode, _second_len)),
        (HashEmbedder, "embed", _wrap_async("embed", HashEmbedder.embed, _second_len)),
    ]
    for target, name, wrapped in hooks:
        setattr(target, name, wrapped)

    original_create_app = app.main.create_app

    def create_app(*args: Any, **kwargs: Any) -> Any:
        inner = original_create_app(*args, **kwargs)

        return _Timed(inner)

    app.main.create_app = create_app  # cli.serve imports it at call time


class _Timed:
    """The app, timing each POST. It carries the app's `state`, which `cli.serve` reads
    (the shutdown signal) after create_app returns."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.state = inner.state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.inner(scope, receive, send)
            return
        wall, start = time.time(), time.perf_counter()
        try:
            await self.inner(scope, receive, send)
        finally:
            kind = "request_batch" if scope["path"].endswith("/batch") else "request"
            RECORDS.append((kind, wall, time.perf_counter() - start, 0))


def dump() -> None:
    out = os.environ.get("ENGRAM_BENCH_PROFILE_OUT")
    if out:
        with open(out, "w") as fh:
            json.dump(RECORDS, fh)


def main() -> int:
    install()
    from app.cli import main as cli_main

    try:
        return cli_main(["serve"])
    finally:
        dump()


if __name__ == "__main__":
    sys.exit(main())
