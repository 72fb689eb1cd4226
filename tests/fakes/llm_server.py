"""Fake LLMs for tests: a real chat-completions HTTP server on 127.0.0.1 and an
in-process `LLMClient`, both answering with the same deterministic `fake_answer`.

The server runs in a thread (`http.server`), so it works beside any event loop and
serves concurrent requests (each on its own thread), which the benchmark needs to show
LLM groups overlapping. Behaviours are scripted per request:

    with FakeLLMServer() as server:
        server.script(Fail(429), Reply("ok"))   # first request 429, second "ok"
        client = ChatCompletionsClient(base_url=server.base_url, model="fake")
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from app.providers.llm import LLMError


def fake_answer(system: str, user: str) -> str:
    """Deterministic "summary": the prompt body after its header, as one line.

    The body is what follows the first blank line (the ops' prompts put memories
    there); bullet markers are dropped and lines joined with spaces.
    """
    body = user.split("\n\n", 1)[-1]
    lines = [line.strip().removeprefix("- ").strip() for line in body.splitlines()]
    return "Summary: " + " ".join(line for line in lines if line)


# Behaviours, one per request --------------------------------------------------------


@dataclass(frozen=True)
class Deterministic:
    """Answer `fake_answer` of the request's messages, after `delay` seconds."""

    delay: float = 0.0


@dataclass(frozen=True)
class Reply:
    """Answer this exact text ("" for an empty answer), ended for `finish_reason`."""

    text: str
    delay: float = 0.0
    finish_reason: str = "stop"


@dataclass(frozen=True)
class Fail:
    """Answer an HTTP error status, with a Retry-After header when given."""

    status: int = 500
    retry_after: float | None = None


@dataclass(frozen=True)
class EchoAuthorization:
    """Answer an HTTP error whose message repeats the request's Authorization header, as
    some providers' errors do."""

    status: int = 400


@dataclass(frozen=True)
class Hang:
    """Say nothing for `seconds` (past the client's timeout), then answer."""

    seconds: float = 5.0


@dataclass(frozen=True)
class Garbage:
    """Answer 200 with a body that is not a completion (bytes as they are, with any
    extra headers: a Content-Encoding the body is not in, say)."""

    body: str | bytes = "<html>this is not json"
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NoChoices:
    """Answer 200 with JSON that has no choices."""


Behaviour = Deterministic | Reply | Fail | EchoAuthorization | Hang | Garbage | NoChoices


@dataclass(frozen=True)
class RecordedRequest:
    path: str
    authorization: str | None
    body: Any
    request_id: str | None = None
    # Azure OpenAI's classic header for the key.
    api_key: str | None = None

    @property
    def messages(self) -> list[dict[str, str]]:
        messages: list[dict[str, str]] = self.body["messages"]
        return messages


# The server ---------------------------------------------------------------------------


class FakeLLMServer:
    def __init__(self, default: Behaviour | None = None) -> None:
        self.default: Behaviour = default or Deterministic()
        self.requests: list[RecordedRequest] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests it ever answered at once
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler, self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-llm",
            daemon=True,
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next requests; afterwards `default` answers."""
        with self._lock:
            self._script.extend(behaviours)

    def start(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes handlers inside a Hang
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _next(self, request: RecordedRequest) -> Behaviour:
        with self._lock:
            self.requests.append(request)
            return self._script.popleft() if self._script else self.default


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a handler inside a Hang must not hold up stop()
    # The default backlog of 5 drops the SYNs of a burst of concurrent clients, which
    # then retry a second later: a benchmark would measure that second.
    request_queue_size = 256

    def __init__(
        self, address: tuple[str, int], handler: type[_Handler], fake: FakeLLMServer
    ) -> None:
        super().__init__(address, handler)
        self.fake = fake


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output clean

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.partition("?")[0].rstrip("/") != "/v1/chat/completions":
            self._send(404, b'{"error": "not found"}')
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, b'{"error": "bad json"}')
            return
        fake = self.server.fake
        behaviour = fake._next(RecordedRequest(self.path, self.headers.get("Authorization"), body,
                                                   self.headers.get("X-Request-ID"),
                                                   self.headers.get("api-key")))
        with fake._lock:
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
        try:
            # A client that gave up (a timeout test) has nobody left to answer.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._answer(behaviour, body, fake._stopping)
        finally:
            with fake._lock:
                fake.in_flight -= 1

    def _answer(self, behaviour: Behaviour, body: Any, stopping: threading.Event) -> None:
        match behaviour:
            case Deterministic(delay=delay):
                stopping.wait(delay)
                messages = {m["role"]: m["content"] for m in body["messages"]}
                self._completion(fake_answer(messages["system"], messages["user"]))
            case Reply(text=text, delay=delay, finish_reason=finish_reason):
                stopping.wait(delay)
                self._completion(text, finish_reason)
            case Fail(status=status, retry_after=retry_after):
                headers = {} if retry_after is None else {"Retry-After": f"{retry_after:g}"}
                self._send(status, b'{"error": {"message": "scripted failure"}}', headers)
            case EchoAuthorization(status=status):
                echoed = {"error": {"message": "Invalid request. Authorization: "
                                               f"{self.headers.get('Authorization')}"}}
                self._send(status, json.dumps(echoed).encode())
            case Hang(seconds=seconds):
                stopping.wait(seconds)
                self._completion("too late")
            case Garbage(body=text, headers=headers):
                self._send(200, text if isinstance(text, bytes) else text.encode(),
                           dict(headers))
            case NoChoices():
                self._send(200, b'{"id": "x", "object": "chat.completion", "choices": []}')

    def _completion(self, text: str, finish_reason: str = "stop") -> None:
        payload = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": "fake",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish_reason,
                }
            ],
        }
        self._send(200, json.dumps(payload).encode())

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)


# The in-process fake --------------------------------------------------------------------


@dataclass
class FakeLLM:
    """An `LLMClient` without a network: scripted answers or errors, then `fake_answer`.

    Records every call and the most calls ever in flight at once, so tests can check
    concurrency bounds.
    """

    script: deque[str | BaseException] = field(default_factory=deque)
    delay: float = 0.0
    calls: list[tuple[str, str]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    @classmethod
    def scripted(cls, answers: Iterable[str | BaseException], delay: float = 0.0) -> FakeLLM:
        return cls(script=deque(answers), delay=delay)

    async def complete(self, system: str, user: str) -> str:
        self.calls.append((system, user))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if not self.script:
                return fake_answer(system, user)
            item = self.script.popleft()
            if isinstance(item, BaseException):
                raise item
            return item
        finally:
            self.in_flight -= 1


def llm_error(code: str = "llm_http_error") -> LLMError:
    """An `LLMError` as the real client raises it, for scripts."""
    return LLMError(f"scripted {code}", code=code)
