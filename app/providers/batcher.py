"""Schedules embedding calls onto the model's worker: short passes, queries first.

A model on two cores runs best one pass at a time, so every call queues for one worker.
Three rules keep a search's query from waiting behind writes:

- **Passes are short.** A pass holds at most `max_batch` texts and `pass_chars`
  characters (always at least one text), so a batch of 500 memories is embedded in many
  passes instead of one of several seconds. all-MiniLM-L6-v2 on ONNX Runtime embeds about
  as many texts per second in passes of one as of 64 (119 against 105 a second, alone on
  this machine), provided a pass holds texts of about one length, so a batch call is taken
  shortest first: in the service a batch of 100 went from 101 to 108 memories a second,
  one of 500 from 117 to 109 (docs/benchmarks/search_under_ingest_2026-11-24.md).
- **Queries go first, then single texts, then batches.** A call is *urgent* (a search's
  query), *single* (one text: a single write, a summary) or *bulk* (a batch write). The
  next pass serves the most urgent class waiting, its calls coalesced in arrival order,
  and never mixes classes, which would make an urgent pass longer. A class that a pass
  went past is owed a turn, and owed classes are served before any other, most urgent
  first: a stream of queries cannot starve writes, nor single writes a batch; each class
  waiting gets at least every third pass.
- **Nor for the pass under way**, given a second worker (`run_urgent`, the query lane):
  while the first runs a pass of writes, queries are embedded on the second, beside it
  (with 4 single writers, search p50 50-51 -> 30-35 ms;
  docs/benchmarks/search_query_lane_2026-11-24.md). The lane serves queries only, and
  only while the first worker runs writes, so searches with nothing written, however
  many, are served exactly as with one worker.

A call whose caller has gone (cancelled) or whose earlier pass failed is not embedded
further.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from app.providers.embedder import Vector


@dataclass
class _Pending:
    texts: Sequence[str]
    future: asyncio.Future[list[Vector]] = field(repr=False)
    # Where each of `texts` stands in the caller's list (None: in the same place).
    order: Sequence[int] | None = None
    # Texts handed to the model so far, and the vectors of those it has answered.
    taken: int = 0
    vectors: list[Vector] = field(default_factory=list, repr=False)

    def answer(self) -> None:
        if self.order is None:
            self.future.set_result(self.vectors)
            return
        by_position = sorted(range(len(self.order)), key=self.order.__getitem__)
        self.future.set_result([self.vectors[k] for k in by_position])


@dataclass(frozen=True)
class _Slice:
    """Texts [start, end) of one call, in a pass."""

    pending: _Pending
    start: int
    end: int


_URGENT = 0

Worker = Callable[[Callable[[], list[Vector]]], asyncio.Future[list[Vector]]]


class MicroBatcher:
    def __init__(
        self,
        run_batch: Callable[[list[str]], list[Vector]],
        run_in_worker: Worker,
        max_batch: int,
        pass_chars: int | None = None,
        run_urgent: Worker | None = None,
    ) -> None:
        self._run_batch = run_batch
        self._run_in_worker = run_in_worker
        self._run_urgent = run_urgent
        self._max_batch = max_batch
        self._pass_chars = pass_chars
        # Urgent, single, bulk: most urgent first.
        self._queues: tuple[deque[_Pending], ...] = (deque(), deque(), deque())
        self._owed = [False] * len(self._queues)
        self._task: asyncio.Task[None] | None = None
        # The class of the pass the first worker runs (None: it is idle).
        self._running: int | None = None
        self._lane: asyncio.Task[None] | None = None

    async def embed(self, texts: Sequence[str], urgent: bool = False) -> list[Vector]:
        """One vector per text, in order. `urgent`: a caller waiting to answer a search."""
        if not texts:
            return []
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Vector]] = loop.create_future()
        rank = _URGENT if urgent else 1 if len(texts) == 1 else 2
        if len(texts) == 1:
            pending = _Pending(texts, future)
        else:
            # Shortest first: each pass then holds texts of about one length, so the model
            # pads little (in the service a batch of 500 cost 6.95 ms a text embedded
            # whole and sorted, 8.2 ms in passes of the caller's order).
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            pending = _Pending([texts[i] for i in order], future, order)
        self._queues[rank].append(pending)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._drain())
        else:
            self._open_lane()
        return await future

    def _open_lane(self) -> None:
        """Queries waiting while the first worker runs writes go to the query lane."""
        if (self._run_urgent is None or self._running in (None, _URGENT)
                or not self._queues[_URGENT]):
            return
        if self._lane is None or self._lane.done():
            self._lane = asyncio.get_running_loop().create_task(self._drain_lane())

    def _fits(self, count: int, chars: int, text: str) -> bool:
        """Whether one more text joins a pass already holding `count` texts."""
        if count == 0:
            return True
        if count >= self._max_batch:
            return False
        return self._pass_chars is None or chars + len(text) <= self._pass_chars

    def _choose(self) -> int | None:
        """The class the first worker's next pass serves; it owes the others a turn."""
        for queue in self._queues:
            while queue and queue[0].future.done():
                queue.popleft()
        waiting = [rank for rank, queue in enumerate(self._queues) if queue]
        if not waiting:
            return None
        owed = [rank for rank in waiting if self._owed[rank]]
        chosen = (owed or waiting)[0]
        self._owed = [rank in waiting and rank != chosen for rank in range(len(self._queues))]
        return chosen

    def _take(self, rank: int) -> list[_Slice]:
        """The next pass: texts of the calls of one class, in arrival order."""
        queue = self._queues[rank]
        taken: list[_Slice] = []
        count = chars = 0
        while queue:
            pending = queue[0]
            if pending.future.done():
                queue.popleft()
                continue
            start = end = pending.taken
            while end < len(pending.texts) and self._fits(count, chars, pending.texts[end]):
                chars += len(pending.texts[end])
                count += 1
                end += 1
            if end > start:
                taken.append(_Slice(pending, start, end))
                pending.taken = end
            if end < len(pending.texts):
                break
            queue.popleft()
        return taken

    async def _drain(self) -> None:
        while (rank := self._choose()) is not None:
            taken = self._take(rank)
            if not taken:
                continue
            self._running = rank
            self._open_lane()
            try:
                await self._run_pass(taken, self._run_in_worker)
            finally:
                self._running = None

    async def _drain_lane(self) -> None:
        assert self._run_urgent is not None
        while taken := self._take(_URGENT):
            await self._run_pass(taken, self._run_urgent)

    async def _run_pass(self, taken: list[_Slice], worker: Worker) -> None:
        texts = [t for s in taken for t in s.pending.texts[s.start:s.end]]
        try:
            vectors = await worker(partial(self._run_batch, texts))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            # Every caller of the pass gets an answer, whatever the model raised: a
            # BaseException escaping this task left them waiting for ever. One that is
            # not an Exception (SystemExit from a library, say) reaches them wrapped,
            # so it fails their request instead of stopping the event loop. A bulk
            # call that failed is not embedded further (_take drops it).
            error = exc if isinstance(exc, Exception) else RuntimeError(
                f"the embedding model failed: {exc!r}")
            for s in taken:
                if not s.pending.future.done():
                    s.pending.future.set_exception(error)
            return
        offset = 0
        for s in taken:
            pending, size = s.pending, s.end - s.start
            if not pending.future.done():
                pending.vectors.extend(vectors[offset:offset + size])
                if len(pending.vectors) == len(pending.texts):
                    pending.answer()
            offset += size

    async def aclose(self) -> None:
        tasks = [t for t in (self._task, self._lane) if t is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
