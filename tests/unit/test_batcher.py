"""MicroBatcher: concurrent embed calls share forward passes on one worker thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from app.providers.batcher import MicroBatcher
from app.providers.embedder import Vector


class Boom(RuntimeError):
    pass


class FakeModel:
    """A synchronous `run_batch`: records each batch and the thread it ran on.

    The vector of "t7" is [7.0, <len>], so every caller can check it got its own texts
    back. A text containing "boom" fails the whole batch. `gate`, when set, holds the
    first batch until released, so tests can queue calls behind a running pass.
    """

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.batches: list[list[str]] = []
        self.threads: set[str] = set()
        self.started = threading.Event()
        self._gate = gate

    def __call__(self, texts: list[str]) -> list[Vector]:
        self.batches.append(list(texts))
        self.threads.add(threading.current_thread().name)
        self.started.set()
        if self._gate is not None and len(self.batches) == 1:
            self._gate.wait(5)
        if any("boom" in t for t in texts):
            raise Boom(f"batch of {len(texts)} failed")
        return [vector_of(t) for t in texts]


def vector_of(text: str) -> Vector:
    return [float(text.lstrip("t")), float(len(text))]


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fake-model")
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


def make_batcher(model: FakeModel, executor: ThreadPoolExecutor,
                 max_batch: int) -> MicroBatcher:
    def run_in_worker(fn: Callable[[], list[Vector]]) -> asyncio.Future[list[Vector]]:
        return asyncio.get_running_loop().run_in_executor(executor, fn)

    return MicroBatcher(model, run_in_worker, max_batch=max_batch)


async def test_concurrent_single_calls_are_coalesced_into_fewer_batches(
    executor: ThreadPoolExecutor,
) -> None:
    model = FakeModel()
    batcher = make_batcher(model, executor, max_batch=64)

    texts = [f"t{i}" for i in range(20)]
    results = await asyncio.gather(*(batcher.embed([t]) for t in texts))

    assert len(model.batches) < len(texts)
    assert sorted(t for batch in model.batches for t in batch) == sorted(texts)
    assert results == [[vector_of(t)] for t in texts]
    # The model ran on the worker, never on the event loop's thread.
    assert model.threads
    assert all(name.startswith("fake-model") for name in model.threads)
    await batcher.aclose()


async def test_results_map_back_to_callers_with_multi_text_requests(
    executor: ThreadPoolExecutor,
) -> None:
    model = FakeModel()
    batcher = make_batcher(model, executor, max_batch=10)
    requests = [[f"t{i}{j}" for j in range(1 + i % 3)] for i in range(1, 9)]

    results = await asyncio.gather(*(batcher.embed(r) for r in requests))

    for request, vectors in zip(requests, results, strict=True):
        assert vectors == [vector_of(t) for t in request]
    assert len(model.batches) < len(requests)
    await batcher.aclose()


async def test_max_batch_is_respected(executor: ThreadPoolExecutor) -> None:
    model = FakeModel()
    batcher = make_batcher(model, executor, max_batch=4)

    texts = [f"t{i}" for i in range(10)]
    results = await asyncio.gather(*(batcher.embed([t]) for t in texts))

    assert [len(b) for b in model.batches] == [4, 4, 2]
    assert all(len(b) <= 4 for b in model.batches)
    assert results == [[vector_of(t)] for t in texts]
    await batcher.aclose()


async def test_a_request_larger_than_max_batch_runs_alone(executor: ThreadPoolExecutor) -> None:
    model = FakeModel()
    batcher = make_batcher(model, executor, max_batch=4)
    big = [f"t{i}" for i in range(100, 106)]

    small_a, large, small_b = await asyncio.gather(
        batcher.embed(["t1"]), batcher.embed(big), batcher.embed(["t2"])
    )

    assert small_a == [vector_of("t1")]
    assert large == [vector_of(t) for t in big]
    assert small_b == [vector_of("t2")]
    # Never mixed with other callers' texts; only an oversized request exceeds max_batch.
    assert big in model.batches
    assert all(len(b) <= 4 for b in model.batches if b != big)
    await batcher.aclose()


async def test_calls_arriving_during_a_pass_are_coalesced_into_the_next_batch(
    executor: ThreadPoolExecutor,
) -> None:
    gate = threading.Event()
    model = FakeModel(gate)
    batcher = make_batcher(model, executor, max_batch=64)

    first = asyncio.ensure_future(batcher.embed(["t0"]))
    for _ in range(200):
        if model.started.is_set():
            break
        await asyncio.sleep(0.01)
    assert model.started.is_set()
    later = [asyncio.ensure_future(batcher.embed([f"t{i}"])) for i in range(1, 8)]
    await asyncio.sleep(0.05)
    gate.set()

    assert await first == [vector_of("t0")]
    assert [await f for f in later] == [[vector_of(f"t{i}")] for i in range(1, 8)]
    assert model.batches == [["t0"], [f"t{i}" for i in range(1, 8)]]
    await batcher.aclose()


async def test_an_exception_fails_only_the_calls_of_its_batch(
    executor: ThreadPoolExecutor,
) -> None:
    model = FakeModel()
    batcher = make_batcher(model, executor, max_batch=2)
    texts = ["t1", "t2", "boom", "t3", "t4", "t5"]

    results = await asyncio.gather(*(batcher.embed([t]) for t in texts),
                                   return_exceptions=True)

    assert model.batches == [["t1", "t2"], ["boom", "t3"], ["t4", "t5"]]
    assert results[0] == [vector_of("t1")]
    assert results[1] == [vector_of("t2")]
    assert isinstance(results[2], Boom)
    assert isinstance(results[3], Boom)
    assert results[4] == [vector_of("t4")]
    assert results[5] == [vector_of("t5")]

    # The batcher keeps working after a failed batch.
    assert await batcher.embed(["t9"]) == [vector_of("t9")]
    await batcher.aclose()


async def test_an_empty_request_never_reaches_the_model(executor: ThreadPoolExecutor) -> None:
    model = FakeModel()
    batcher = make_batcher(model, executor, max_batch=4)

    assert await batcher.embed([]) == []
    assert model.batches == []
    await batcher.aclose()


async def test_sequential_calls_after_a_drain_start_a_new_batch(
    executor: ThreadPoolExecutor,
) -> None:
    model = FakeModel()
    batcher = make_batcher(model, executor, max_batch=4)

    assert await batcher.embed(["t1"]) == [vector_of("t1")]
    assert await batcher.embed(["t2", "t3"]) == [vector_of("t2"), vector_of("t3")]
    assert model.batches == [["t1"], ["t2", "t3"]]
    await batcher.aclose()


class Fatal(BaseException):
    """Not an Exception: the batch's callers must still be answered."""


async def test_an_error_outside_exception_fails_the_batch_and_the_batcher_goes_on(
    executor: ThreadPoolExecutor,
) -> None:
    calls: list[list[str]] = []

    def model(texts: list[str]) -> list[Vector]:
        calls.append(texts)
        if len(calls) == 1:
            raise Fatal("the model died")
        return [vector_of(t) for t in texts]

    def run_in_worker(fn: Callable[[], list[Vector]]) -> asyncio.Future[list[Vector]]:
        return asyncio.get_running_loop().run_in_executor(executor, fn)

    batcher = MicroBatcher(model, run_in_worker, max_batch=8)

    with pytest.raises(RuntimeError, match="the model died"):
        await asyncio.wait_for(batcher.embed(["t1"]), timeout=5)
    assert await batcher.embed(["t2"]) == [vector_of("t2")]
    await batcher.aclose()
