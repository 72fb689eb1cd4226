"""The bound on requests in flight: admitted at once while slots are free, queued for a
while when none is, refused with a 503 problem after that; probes never held."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.service.admission import AdmissionMiddleware, at_request_end
from app.service.metrics import REGISTRY


class Held:
    """An app whose requests stay in flight until released."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.entered += 1
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


def scope(path: str = "/v1/search") -> Scope:
    return {"type": "http", "method": "POST", "path": path, "headers": []}


async def receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def call(app: AdmissionMiddleware, path: str = "/v1/search") -> list[Message]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope(path), receive, send)
    return sent


def shed_count() -> float:
    return REGISTRY.get_sample_value("engram_http_requests_shed_total") or 0.0


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_past_the_limit_a_request_waits_then_is_refused_with_a_problem() -> None:
    held = Held()
    app = AdmissionMiddleware(held, limit=2, wait_seconds=0.05)
    before = shed_count()
    first = [asyncio.create_task(call(app)) for _ in range(2)]
    await settle()

    refused = await call(app)
    held.release.set()
    answered = await asyncio.gather(*first)

    assert held.entered == 2  # the third never reached the app
    start, body = refused
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    assert start["status"] == 503
    assert headers["retry-after"] == "1"
    assert headers["content-type"] == "application/problem+json"
    problem = json.loads(body["body"])
    assert problem["type"].endswith("/overloaded")
    assert problem["detail"] == ("2 requests were already in flight and none finished "
                                 "within 0.05 s; retry later")
    assert [m[0]["status"] for m in answered] == [200, 200]
    assert shed_count() == before + 1


async def test_a_request_queued_gets_the_slot_freed_within_the_wait() -> None:
    held = Held()
    app = AdmissionMiddleware(held, limit=1, wait_seconds=5)
    first = asyncio.create_task(call(app))
    await settle()
    queued = asyncio.create_task(call(app))
    await settle()
    assert held.entered == 1
    assert not queued.done()

    held.release.set()
    answers = await asyncio.gather(first, queued)

    assert [a[0]["status"] for a in answers] == [200, 200]
    assert held.entered == 2


async def test_slots_are_given_back_after_errors_and_refusals() -> None:
    calls = 0

    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("a bug")

    app = AdmissionMiddleware(failing, limit=1, wait_seconds=0.01)
    for _ in range(3):
        with pytest.raises(RuntimeError):
            await call(app)
    assert calls == 3  # each found the slot free again

    held = Held()
    bounded = AdmissionMiddleware(held, limit=1, wait_seconds=0.01)
    first = asyncio.create_task(call(bounded))
    await settle()
    for _ in range(3):  # refused: each timed-out wait leaves the one slot as it was
        assert (await call(bounded))[0]["status"] == 503
    held.release.set()
    await first
    held.release = asyncio.Event()
    held.release.set()
    assert (await call(bounded))[0]["status"] == 200


async def test_probes_and_metrics_are_never_held() -> None:
    held = Held()
    app = AdmissionMiddleware(held, limit=1, wait_seconds=0.01)
    first = asyncio.create_task(call(app))
    await settle()

    probes = [asyncio.create_task(call(app, path)) for path in ("/healthz", "/readyz", "/metrics")]
    await settle()
    assert held.entered == 4  # each probe reached the app beside the held request
    held.release.set()
    await asyncio.gather(first, *probes)


async def test_a_zero_limit_admits_everything() -> None:
    held = Held()
    app = AdmissionMiddleware(held, limit=0, wait_seconds=0)
    tasks = [asyncio.create_task(call(app)) for _ in range(100)]
    await settle()
    assert held.entered == 100
    held.release.set()
    assert all(m[0]["status"] == 200 for m in await asyncio.gather(*tasks))


def in_flight() -> float:
    return REGISTRY.get_sample_value("engram_http_requests_in_flight") or 0.0


async def test_the_requests_in_flight_are_a_gauge_read_at_the_scrape() -> None:
    held = Held()
    app = AdmissionMiddleware(held, limit=2, wait_seconds=0.01)
    assert in_flight() == 0
    requests = [asyncio.create_task(call(app)) for _ in range(2)]
    probe = asyncio.create_task(call(app, "/readyz"))
    await settle()
    during = in_flight()
    assert (await call(app))[0]["status"] == 503  # refused: never counted
    also_during = in_flight()
    held.release.set()
    await asyncio.gather(*requests, probe)

    assert (during, also_during) == (2, 2)  # the probe is not a request served
    assert in_flight() == 0


def queued() -> float:
    return REGISTRY.get_sample_value("engram_http_requests_queued") or 0.0


async def test_the_requests_waiting_for_a_slot_are_a_gauge_too() -> None:
    held = Held()
    app = AdmissionMiddleware(held, limit=1, wait_seconds=0.2)
    first = asyncio.create_task(call(app))
    await settle()
    waiting = [asyncio.create_task(call(app)) for _ in range(2)]
    await settle()
    during = (in_flight(), queued())
    shed = await asyncio.gather(*waiting)  # the held one never finishes in time
    after_shedding = queued()
    held.release.set()
    await first

    assert during == (1, 2)
    assert [answer[0]["status"] for answer in shed] == [503, 503]
    assert (after_shedding, queued(), in_flight()) == (0, 0, 0)


async def test_without_a_bound_the_requests_in_flight_are_still_counted() -> None:
    held = Held()
    app = AdmissionMiddleware(held, limit=0, wait_seconds=0)
    requests = [asyncio.create_task(call(app)) for _ in range(3)]
    await settle()
    during = in_flight()
    held.release.set()
    await asyncio.gather(*requests)
    assert (during, in_flight()) == (3, 0)


async def test_what_a_request_holds_is_given_back_however_it_ends() -> None:
    ended: list[str] = []

    def holding(name: str, then: BaseException | None) -> ASGIApp:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            at_request_end(scope, lambda: ended.append(name))
            assert ended == []  # not before the request is over
            if then is not None:
                raise then
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
        return app

    for name, then in (("answered", None), ("failed", RuntimeError("a bug")),
                       ("cut", asyncio.CancelledError())):
        ended.clear()
        with contextlib.suppress(RuntimeError, asyncio.CancelledError):
            await call(AdmissionMiddleware(holding(name, then), limit=0, wait_seconds=0))
        assert ended == [name]


async def test_nothing_runs_at_the_end_of_a_request_that_held_nothing() -> None:
    seen: list[Scope] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope)
        await send({"type": "http.response.start", "status": 204, "headers": []})

    await call(AdmissionMiddleware(app, limit=4, wait_seconds=0))
    assert seen[0]["state"] == {}
