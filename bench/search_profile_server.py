"""`python -m app serve` with timing hooks, for `bench/search.py --profile`.

Runs the unmodified service (same settings, same code path: it calls `app.cli.main(["serve"])`)
but wraps, at import time:

* the ASGI app: server-side wall time of every POST /v1/search (first byte handed to the app
  to the last byte of the answer), tagged with the scope class the benchmark sends in the
  `x-bench-class` header (a context variable carries the tag into the hooks below),
* `LocalEmbedder.embed_query`: what the request waits for its query vector (includes the
  micro-batcher's queue and the hand-off to the embedder thread),
* `LocalEmbedder._encode`: the model's forward pass alone, on the embedder thread (untagged:
  a batch can serve several requests),
* `SearchRepository.text_matches`: the full-text statement (one round trip on the search's
  asyncpg pool), which the service starts before embedding the query, so it overlaps the
  embedding; its end against the end of `embed` says how long a request waited for it
  after its vector was ready,
* `SearchRepository.candidates`: the vector statement after the embedding (one round trip)
  plus building the RetrievedRows,
* `SearchPipeline.run`: the pure stages (fusion, scoring, down-weight, cut).

A search has no request session and no COMMIT any more (app/search/reader.py). The
service runs embed and text_matches side by side, then candidates and the pipeline one
after the other; the benchmark subtracts the critical path (the embed/text span, vector,
pipeline) from the request to get the rest (`encode` runs inside `embed`). Each call
costs two clock reads and one list append. On exit (SIGINT/SIGTERM make uvicorn shut down
cleanly) the records are written as JSON to `$ENGRAM_BENCH_PROFILE_OUT`.
"""

from __future__ import annotations

import contextvars
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

# (kind, class tag, wall-clock start in seconds since the epoch, duration in seconds)
RECORDS: list[tuple[str, str, float, float]] = []
TAG: contextvars.ContextVar[str] = contextvars.ContextVar("bench_class", default="")


def _wrap_async(kind: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, start = time.time(), time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            RECORDS.append((kind, TAG.get(), wall, time.perf_counter() - start))

    return wrapper


def _wrap_sync(kind: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        wall, start = time.time(), time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            RECORDS.append((kind, TAG.get(), wall, time.perf_counter() - start))

    return wrapper


def install() -> None:
    import app.main
    from app.providers.local_embedder import LocalEmbedder
    from app.search.pipeline import SearchPipeline
    from app.search.repository import SearchRepository

    hooks: list[tuple[Any, str, Any]] = [
        (LocalEmbedder, "embed_query", _wrap_async("embed", LocalEmbedder.embed_query)),
        (LocalEmbedder, "_encode", _wrap_sync("encode", LocalEmbedder._encode)),
        # The text task copies the request's context, so its record carries the tag too.
        (SearchRepository, "text_matches", _wrap_async("text", SearchRepository.text_matches)),
        (SearchRepository, "candidates", _wrap_async("vector", SearchRepository.candidates)),
        (SearchPipeline, "run", _wrap_sync("pipeline", SearchPipeline.run)),
    ]
    for target, name, wrapped in hooks:
        setattr(target, name, wrapped)

    original_create_app = app.main.create_app

    def create_app(*args: Any, **kwargs: Any) -> Any:
        inner = original_create_app(*args, **kwargs)

        return _Timed(inner)

    app.main.create_app = create_app  # cli.serve imports it at call time


class _Timed:
    """The app, timing each POST /v1/search. It carries the app's `state`, which
    `cli.serve` reads (the shutdown signal) after create_app returns."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.state = inner.state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/search":
            await self.inner(scope, receive, send)
            return
        tag = ""
        for key, value in scope.get("headers", []):
            if key == b"x-bench-class":
                tag = value.decode()
        token = TAG.set(tag)
        wall, start = time.time(), time.perf_counter()
        try:
            await self.inner(scope, receive, send)
        finally:
            RECORDS.append(("request", tag, wall, time.perf_counter() - start))
            TAG.reset(token)


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
