"""MicroBatcher: concurrent embed calls share forward passes on one worker thread."""

from __future__ import annotations

import asyncio
import threading
import time
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


def make_batcher(model: Callable[[list[str]], list[Vector]], executor: ThreadPoolExecutor,
                 max_batch: int, pass_chars: int | None = None) -> MicroBatcher:
    def run_in_worker(fn: Callable[[], list[Vector]]) -> asyncio.Future[list[Vector]]:
        return asyncio.get_running_loop().run_in_executor(executor, fn)

    return MicroBatcher(model, run_in_worker, max_batch=max_batch, pass_chars=pass_chars)


async def first_pass_running(model: FakeModel) -> None:
    for _ in range(500):
        if model.started.is_set():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the model never started a pass")


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


async def test_a_request_larger_than_max_batch_is_split_into_passes_of_its_own(
    executor: ThreadPoolExecutor,
) -> None:
    model = FakeModel()
    batcher = make_batcher(model, executor, max_batch=4)
    big = [f"t{i}" for i in range(100, 110)]

    small_a, large, small_b = await asyncio.gather(
        batcher.embed(["t1"]), batcher.embed(big), batcher.embed(["t2"])
    )

    assert small_a == [vector_of("t1")]
    assert large == [vector_of(t) for t in big]
    assert small_b == [vector_of("t2")]
    # The single texts share a pass; the batch goes in passes of max_batch, never mixed.
    assert model.batches == [["t1", "t2"], big[:4], big[4:8], big[8:]]


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


# Scheduling: short passes, single texts before batches.


async def test_a_pass_holds_at_most_pass_chars_characters_but_always_one_text(
    executor: ThreadPoolExecutor,
) -> None:
    model = FakeModel()
    batcher = make_batcher(model, executor, max_batch=64, pass_chars=10)
    # Texts of 4, 4, 4, 12 and 3 characters.
    batch = ["t100", "t200", "t300", "t40000000000", "t50"]

    assert await batcher.embed(batch) == [vector_of(t) for t in batch]
    # Shortest first, so a pass holds texts of about one length (answered in the caller's
    # order); 3 + 4 fit in 10, a third does not; a text longer than the budget goes alone.
    assert model.batches == [["t50", "t100"], ["t200", "t300"], ["t40000000000"]]

    model.batches.clear()
    singles = [f"t{i}{i}" for i in range(1, 6)]
    results = await asyncio.gather(*(batcher.embed([t]) for t in singles))
    assert results == [[vector_of(t)] for t in singles]
    assert all(sum(map(len, b)) <= 10 for b in model.batches)
    assert [t for b in model.batches for t in b] == singles
    await batcher.aclose()


async def test_a_single_text_queued_behind_a_batch_goes_before_the_rest_of_it(
    executor: ThreadPoolExecutor,
) -> None:
    gate = threading.Event()
    model = FakeModel(gate)
    batcher = make_batcher(model, executor, max_batch=2)
    batch = [f"t{i}" for i in range(100, 108)]

    bulk = asyncio.ensure_future(batcher.embed(batch))
    await first_pass_running(model)
    query = asyncio.ensure_future(batcher.embed(["t7"]))
    await asyncio.sleep(0.05)
    gate.set()

    assert await query == [vector_of("t7")]
    # Answered after one pass of the batch, while the batch still had passes to go.
    assert not bulk.done()
    assert await bulk == [vector_of(t) for t in batch]
    assert model.batches == [batch[:2], ["t7"], batch[2:4], batch[4:6], batch[6:]]
    await batcher.aclose()


async def test_single_texts_do_not_share_a_pass_with_batch_texts(
    executor: ThreadPoolExecutor,
) -> None:
    gate = threading.Event()
    model = FakeModel(gate)
    batcher = make_batcher(model, executor, max_batch=8)

    first = asyncio.ensure_future(batcher.embed(["t0"]))
    await first_pass_running(model)
    bulk = asyncio.ensure_future(batcher.embed(["t10", "t11"]))
    singles = [asyncio.ensure_future(batcher.embed([f"t{i}"])) for i in (1, 2)]
    await asyncio.sleep(0.05)
    gate.set()

    await asyncio.gather(first, bulk, *singles)
    # The single texts waiting go first, then the batch: never one pass of both.
    assert model.batches == [["t0"], ["t1", "t2"], ["t10", "t11"]]
    await batcher.aclose()


class Stream:
    """A `run_batch` that records each pass and, during each of its first `arrivals`
    passes, has one more single-text call arrive (`urgent` or not), as under steady load."""

    def __init__(self, arrivals: int, urgent: bool) -> None:
        self.loop = asyncio.get_running_loop()
        self.arrivals = arrivals
        self.urgent = urgent
        self.passes: list[list[str]] = []
        self.arrived: list[asyncio.Future[list[Vector]]] = []
        self.batcher: MicroBatcher | None = None

    def __call__(self, texts: list[str]) -> list[Vector]:
        self.passes.append(list(texts))
        if len(self.passes) <= self.arrivals:
            self.loop.call_soon_threadsafe(self._arrive, f"t{len(self.passes)}")
            time.sleep(0.02)
        return [vector_of(t) for t in texts]

    def _arrive(self, text: str) -> None:
        assert self.batcher is not None
        self.arrived.append(asyncio.ensure_future(self.batcher.embed([text], self.urgent)))


async def test_a_stream_of_single_texts_does_not_starve_a_batch(
    executor: ThreadPoolExecutor,
) -> None:
    stream = Stream(arrivals=6, urgent=False)
    batcher = stream.batcher = make_batcher(stream, executor, max_batch=2)

    first = asyncio.ensure_future(batcher.embed(["t0"]))
    await asyncio.sleep(0)
    bulk = await batcher.embed([f"t{i}" for i in range(100, 106)])
    await first
    await asyncio.gather(*stream.arrived)

    assert bulk == [vector_of(f"t{i}") for i in range(100, 106)]
    kinds = ["bulk" if any(len(t) == 4 for t in p) else "single" for p in stream.passes]
    # While the batch waits, it gets every other pass however many single texts come.
    batch_waiting = kinds[:kinds.index("bulk") + 5]
    assert "single, single" not in ", ".join(batch_waiting), stream.passes
    await batcher.aclose()


async def test_a_failed_pass_fails_its_batch_and_the_rest_is_never_embedded(
    executor: ThreadPoolExecutor,
) -> None:
    model = FakeModel()
    batcher = make_batcher(model, executor, max_batch=2)
    batch = ["t101", "t102", "boom", "t103", "t104", "t105"]

    failed, other = await asyncio.gather(batcher.embed(batch), batcher.embed(["t6", "t7"]),
                                         return_exceptions=True)

    assert isinstance(failed, Boom)
    assert other == [vector_of("t6"), vector_of("t7")]
    assert model.batches == [["t101", "t102"], ["boom", "t103"], ["t6", "t7"]]
    await batcher.aclose()


async def test_a_cancelled_callers_remaining_texts_are_never_embedded(
    executor: ThreadPoolExecutor,
) -> None:
    gate = threading.Event()
    model = FakeModel(gate)
    batcher = make_batcher(model, executor, max_batch=2)
    batch = [f"t{i}" for i in range(100, 110)]

    bulk = asyncio.ensure_future(batcher.embed(batch))
    await first_pass_running(model)
    bulk.cancel()
    await asyncio.sleep(0.01)
    gate.set()

    assert await batcher.embed(["t1"]) == [vector_of("t1")]
    assert model.batches == [batch[:2], ["t1"]]
    assert bulk.cancelled()
    await batcher.aclose()


async def test_a_query_goes_before_single_texts_and_batches_queued_earlier(
    executor: ThreadPoolExecutor,
) -> None:
    gate = threading.Event()
    model = FakeModel(gate)
    batcher = make_batcher(model, executor, max_batch=8)

    first = asyncio.ensure_future(batcher.embed(["t0"]))
    await first_pass_running(model)
    bulk = asyncio.ensure_future(batcher.embed(["t10", "t11"]))
    singles = [asyncio.ensure_future(batcher.embed([f"t{i}"])) for i in (1, 2)]
    queries = [asyncio.ensure_future(batcher.embed([f"t{i}"], urgent=True)) for i in (7, 8)]
    await asyncio.sleep(0.05)
    gate.set()

    assert [await q for q in queries] == [[vector_of("t7")], [vector_of("t8")]]
    await asyncio.gather(first, bulk, *singles)
    # The queries share a pass of their own, ahead of everything queued before them.
    assert model.batches == [["t0"], ["t7", "t8"], ["t1", "t2"], ["t10", "t11"]]
    await batcher.aclose()


async def test_a_stream_of_queries_starves_neither_single_writes_nor_batches(
    executor: ThreadPoolExecutor,
) -> None:
    stream = Stream(arrivals=9, urgent=True)
    batcher = stream.batcher = make_batcher(stream, executor, max_batch=1)

    first = asyncio.ensure_future(batcher.embed(["t0"], urgent=True))
    await asyncio.sleep(0)
    single, bulk = await asyncio.gather(batcher.embed(["t500"]),
                                        batcher.embed(["t1000", "t1001", "t1002"]))
    await first
    await asyncio.gather(*stream.arrived)

    assert single == [vector_of("t500")]
    assert bulk == [vector_of(t) for t in ("t1000", "t1001", "t1002")]
    # Queries (t<n>), the single write (t500) and the batch (t1000-t1002) take turns: the
    # single write and the batch are each done within a few passes, not after the stream.
    assert stream.passes.index(["t500"]) <= 3, stream.passes
    assert stream.passes.index(["t1002"]) <= 8, stream.passes
    await batcher.aclose()


@pytest.fixture
def lane() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fake-lane")
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


def make_laned_batcher(model: Callable[[list[str]], list[Vector]], executor: ThreadPoolExecutor,
                       lane: ThreadPoolExecutor, max_batch: int) -> MicroBatcher:
    def on(pool: ThreadPoolExecutor) -> Callable[[Callable[[], list[Vector]]],
                                                 asyncio.Future[list[Vector]]]:
        def run(fn: Callable[[], list[Vector]]) -> asyncio.Future[list[Vector]]:
            return asyncio.get_running_loop().run_in_executor(pool, fn)
        return run

    return MicroBatcher(model, on(executor), max_batch=max_batch, run_urgent=on(lane))


class Recorder(FakeModel):
    """A FakeModel that also records which thread ran each batch."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        super().__init__(gate)
        self.ran_on: dict[str, str] = {}

    def __call__(self, texts: list[str]) -> list[Vector]:
        for t in texts:
            self.ran_on[t] = threading.current_thread().name
        return super().__call__(texts)


@pytest.mark.parametrize("write", [["t0"], ["t0", "t1", "t2"]], ids=["single", "bulk"])
async def test_a_query_is_embedded_on_the_lane_while_the_worker_runs_a_write(
    executor: ThreadPoolExecutor, lane: ThreadPoolExecutor, write: list[str],
) -> None:
    gate = threading.Event()
    model = Recorder(gate)
    batcher = make_laned_batcher(model, executor, lane, max_batch=8)

    writing = asyncio.ensure_future(batcher.embed(write))
    await first_pass_running(model)
    # The write's pass is held: the query is answered while it still runs.
    query = await asyncio.wait_for(batcher.embed(["t7"], urgent=True), 5)
    assert query == [vector_of("t7")]
    assert not writing.done()
    gate.set()

    assert await writing == [vector_of(t) for t in write]
    assert model.ran_on["t7"].startswith("fake-lane")
    assert all(model.ran_on[t].startswith("fake-model") for t in write)
    await batcher.aclose()


async def test_queries_alone_never_use_the_lane_and_still_share_passes(
    executor: ThreadPoolExecutor, lane: ThreadPoolExecutor,
) -> None:
    gate = threading.Event()
    model = Recorder(gate)
    batcher = make_laned_batcher(model, executor, lane, max_batch=8)

    first = asyncio.ensure_future(batcher.embed(["t0"], urgent=True))
    await first_pass_running(model)
    queries = [asyncio.ensure_future(batcher.embed([f"t{i}"], urgent=True)) for i in (1, 2, 3)]
    await asyncio.sleep(0.05)
    assert not any(q.done() for q in queries)
    gate.set()

    assert [await q for q in (first, *queries)] == [[vector_of(f"t{i}")] for i in range(4)]
    # Exactly as with one worker: the queries waiting behind a query share its next pass.
    assert model.batches == [["t0"], ["t1", "t2", "t3"]]
    assert {model.ran_on[f"t{i}"][:10] for i in range(4)} == {"fake-model"}
    await batcher.aclose()


async def test_queries_arriving_during_a_lane_pass_share_the_lanes_next_pass(
    executor: ThreadPoolExecutor, lane: ThreadPoolExecutor,
) -> None:
    write_gate, lane_gate = threading.Event(), threading.Event()

    class Model(Recorder):
        def __call__(self, texts: list[str]) -> list[Vector]:
            if texts == ["t7"]:
                lane_gate.wait(5)
            return super().__call__(texts)

    model = Model(write_gate)
    batcher = make_laned_batcher(model, executor, lane, max_batch=8)

    writing = asyncio.ensure_future(batcher.embed(["t0", "t1"]))
    await first_pass_running(model)
    first = asyncio.ensure_future(batcher.embed(["t7"], urgent=True))
    await asyncio.sleep(0.05)
    later = [asyncio.ensure_future(batcher.embed([f"t{i}"], urgent=True)) for i in (8, 9)]
    await asyncio.sleep(0.05)
    lane_gate.set()

    assert [await q for q in (first, *later)] == [[vector_of(f"t{i}")] for i in (7, 8, 9)]
    assert not writing.done()
    write_gate.set()
    await writing
    assert model.batches[1:] == [["t7"], ["t8", "t9"]]
    assert {model.ran_on[t][:9] for t in ("t7", "t8", "t9")} == {"fake-lane"}
    await batcher.aclose()


async def test_a_failed_lane_pass_fails_only_its_queries(
    executor: ThreadPoolExecutor, lane: ThreadPoolExecutor,
) -> None:
    gate = threading.Event()
    model = Recorder(gate)
    batcher = make_laned_batcher(model, executor, lane, max_batch=8)

    writing = asyncio.ensure_future(batcher.embed(["t0", "t1"]))
    await first_pass_running(model)
    with pytest.raises(Boom):
        await asyncio.wait_for(batcher.embed(["boom"], urgent=True), 5)
    assert not writing.done()
    gate.set()

    assert await writing == [vector_of("t0"), vector_of("t1")]
    assert await batcher.embed(["t5"], urgent=True) == [vector_of("t5")]
    await batcher.aclose()
