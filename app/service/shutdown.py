"""What a request answers when the service's shutdown cuts it.

On SIGTERM uvicorn lets the requests in flight finish for `shutdown_grace_seconds`, then
cancels those still running. Left to uvicorn, each would answer a bare text 500 and log
a traceback, as for a bug. It is no bug: the client is told, in problem+json, that the
service is stopping and to retry (another replica, or this one once started again),
unless the request was cut while its COMMIT was awaited: that change may have been
applied, so it answers 503 outcome_unknown, as a COMMIT that went unanswered does.

uvicorn does not wait for the requests it cancels: it goes on to the app's shutdown at
once, and the process ends with it. A request whose unwinding waits on the database (its
session given back on a connection whose backend has not yet answered the cancel) then
lost its answer: the client saw the connection closed with nothing said. So the requests
in flight are counted here, and the app's shutdown first waits, for at most
`CUT_ANSWER_SECONDS`, until the cut ones have answered.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import COMMIT_CUT, CUT_DETAIL, commit_unanswered, problem_response

log = logging.getLogger("engram.shutdown")

# Long enough for a cut request to give back its connection and answer when the database
# answers at all; short beside the supervisor's grace that follows the service's own.
CUT_ANSWER_SECONDS = 5.0

DETAIL = ("the service is shutting down and stopped this request before it finished; "
          "retry it (a create retried with its Idempotency-Key is applied at most once)")


class RequestsInFlight:
    """How many requests have not answered yet, and a wait until none is left."""

    def __init__(self) -> None:
        self.count = 0
        self._none_left: asyncio.Future[None] | None = None

    def started(self) -> None:
        self.count += 1

    def ended(self) -> None:
        self.count -= 1
        if self.count == 0 and self._none_left is not None and not self._none_left.done():
            self._none_left.set_result(None)

    async def none_left(self, seconds: float) -> bool:
        """Whether every request has answered within `seconds`."""
        if self.count == 0:
            return True
        if self._none_left is None or self._none_left.done():
            self._none_left = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(seconds):
                await asyncio.shield(self._none_left)
        except TimeoutError:
            return False
        return True


class ShutdownSignal:
    """Told when the process is asked to stop (SIGTERM, SIGINT), before uvicorn starts
    letting the requests in flight finish: the background jobs are stopped from then on,
    beside the requests, within the same grace. Told only at the app's shutdown, as
    uvicorn does, the workers' own grace came after the requests' (20 s + 10 s, past the
    30 s a supervisor waits)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind(self) -> asyncio.Event:
        """The event set when the signal comes; in the app's lifespan, on its loop."""
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()
        return self._event

    def received(self) -> None:
        """From the signal handler (app/cli.py), which may run between any two bytecodes
        of the loop's thread: the event is set by the loop itself."""
        if self._loop is not None and self._event is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._event.set)


class ShutdownCutMiddleware:
    """Pure ASGI, like the metrics layer: no task per request on the hot path."""

    def __init__(self, app: ASGIApp, *, in_flight: RequestsInFlight) -> None:
        self.app = app
        self.in_flight = in_flight

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.in_flight.started()
        try:
            await self._answer(scope, receive, send)
        finally:
            self.in_flight.ended()

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False
        # Shared with the request (app/db.py marks a COMMIT cut here); made now, since a
        # copy of the scope made further in would not carry a dict created there back.
        state = scope.setdefault("state", {})

        async def send_tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except asyncio.CancelledError:
            # Only the server cancels a request's task (the app turns its own timeouts
            # into errors first), and it does so at shutdown. Like uvicorn, which would
            # catch it too, the task then ends here.
            log.warning("%s %s cut by the shutdown before it finished", scope["method"],
                        scope["path"])
            if started:  # half an answer sent: nothing to do but close, as uvicorn will
                raise
            headers = {"Retry-After": "1", "Connection": "close"}
            if state.get(COMMIT_CUT):
                lost = commit_unanswered()
                response = problem_response(lost.status, lost.code, lost.title, lost.detail,
                                            headers=headers)
            else:
                response = problem_response(503, "shutting_down", "Shutting down",
                                            state.get(CUT_DETAIL, DETAIL), headers=headers)
            await response(scope, receive, send)
