"""Coalesces concurrent embedding calls into batches for one model worker.

A model on two cores runs best one batch at a time; single-text requests that arrive
together are answered by one forward pass instead of queueing one pass each.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from app.providers.embedder import Vector


@dataclass
class _Pending:
    texts: Sequence[str]
    future: asyncio.Future[list[Vector]] = field(repr=False)


class MicroBatcher:
    def __init__(
        self,
        run_batch: Callable[[list[str]], list[Vector]],
        run_in_worker: Callable[[Callable[[], list[Vector]]], asyncio.Future[list[Vector]]],
        max_batch: int,
    ) -> None:
        self._run_batch = run_batch
        self._run_in_worker = run_in_worker
        self._max_batch = max_batch
        self._queue: list[_Pending] = []
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        pending = _Pending(texts, loop.create_future())
        self._queue.append(pending)
        self._wakeup.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain())
        return await pending.future

    def _take(self) -> list[_Pending]:
        taken: list[_Pending] = []
        count = 0
        while self._queue:
            size = len(self._queue[0].texts)
            # A request larger than a batch goes alone; it is split inside run_batch.
            if taken and count + size > self._max_batch:
                break
            taken.append(self._queue.pop(0))
            count += size
        return taken

    async def _drain(self) -> None:
        while self._queue:
            taken = self._take()
            texts = [t for p in taken for t in p.texts]
            try:
                vectors = await self._run_in_worker(partial(self._run_batch, texts))
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                # Every caller of the batch gets an answer, whatever the model raised: a
                # BaseException escaping this task left them waiting for ever. One that is
                # not an Exception (SystemExit from a library, say) reaches them wrapped,
                # so it fails their request instead of stopping the event loop.
                error = exc if isinstance(exc, Exception) else RuntimeError(
                    f"the embedding model failed: {exc!r}")
                for p in taken:
                    if not p.future.done():
                        p.future.set_exception(error)
                continue
            start = 0
            for p in taken:
                end = start + len(p.texts)
                if not p.future.done():
                    p.future.set_result(vectors[start:end])
                start = end

    async def aclose(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
