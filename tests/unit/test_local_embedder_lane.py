"""Which runtimes of the local embedder get the query lane: a query during a write's pass
runs beside it on ONNX Runtime, after it on torch (a fake encoder stands in for the model)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from app.providers.local_embedder import LocalEmbedder
from app.providers.sentence_encoder import Runtime


class HeldEncoder:
    """Holds the first pass until released; records the thread of every text's pass."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.ran_on: dict[str, str] = {}

    def encode(self, texts: list[str]) -> np.ndarray:
        first = not self.started.is_set()
        self.started.set()
        for t in texts:
            self.ran_on[t] = threading.current_thread().name
        if first:
            self.release.wait(5)
        return np.ones((len(texts), 384), dtype=np.float32)


@pytest.mark.parametrize(("runtime", "query_lane", "beside"), [
    ("onnx", True, True), ("onnx", False, False), ("torch", True, False),
])
async def test_a_query_runs_beside_a_write_only_on_onnx_with_the_lane(
    runtime: Runtime, query_lane: bool, beside: bool,
) -> None:
    encoder = HeldEncoder()
    embedder = LocalEmbedder(runtime=runtime, query_lane=query_lane, encoder=encoder)
    try:
        write = asyncio.ensure_future(embedder.embed(["a write"]))
        assert await asyncio.to_thread(encoder.started.wait, 5)
        query = asyncio.ensure_future(embedder.embed_query("a query"))
        done, _ = await asyncio.wait({query}, timeout=0.3)
        assert bool(done) is beside
        encoder.release.set()
        await asyncio.gather(write, query)
    finally:
        encoder.release.set()
        await embedder.aclose()

    assert encoder.ran_on["a write"] == "embedder_0"
    assert encoder.ran_on["a query"] == ("embedder-query_0" if beside else "embedder_0")
