"""OpenAIEmbedder against a real HTTP server on 127.0.0.1 that answers, fails, throttles,
hangs and talks garbage on cue; and the memory API in front of it, which must answer a
stable problem+json and write nothing when the provider fails."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import select

from app.models import Memory
from app.providers import openai_embedder
from app.providers.answer_preview import MASK, log_unexpected_answer
from app.providers.embedder import build_embedder, probe_embedder
from app.providers.openai_embedder import EmbeddingError, OpenAIEmbedder
from app.resources import Resources
from app.settings import Settings
from tests.conftest import create_tenant_key, make_client, sample

DIMS = 384
API_KEY = "sk-test-embeddings"
MODEL = "fake-embedding-model"
TIMEOUT = 0.4
MAX_RETRIES = 2
BACKOFF = 0.01


def raw_vector(text: str, dims: int = DIMS) -> list[float]:
    """A deterministic, deliberately *not* unit-length vector for `text`."""
    out: list[float] = []
    counter = 0
    while len(out) < dims:
        digest = hashlib.sha256(f"{text}:{counter}".encode()).digest()
        out.extend((b - 127.5) / 10.0 for b in digest)
        counter += 1
    return out[:dims]


def unit(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec))
    return [x / norm for x in vec]


# Behaviours, one per request -------------------------------------------------------------


@dataclass(frozen=True)
class Succeed:
    """200 with `raw_vector` of each input, listed in reverse index order."""


@dataclass(frozen=True)
class Fail:
    status: int = 500
    retry_after: str | None = None
    retry_after_ms: str | None = None


@dataclass(frozen=True)
class RefuseOptions:
    """vLLM's answer to `dimensions` for a model not trained to shorten its vectors: 400
    while the request names it, else Succeed."""


@dataclass(frozen=True)
class BatchLimit:
    """TEI's 413 for more than `limit` inputs, else Succeed."""

    limit: int


@dataclass(frozen=True)
class RefuseText:
    """TEI's 413 for a call holding a text with `marker` (one past the model's input),
    else Succeed; OpenAI's and vLLM's 400 with `openai`."""

    marker: str
    openai: bool = False


@dataclass(frozen=True)
class Trickle:
    """A 200 whose body comes a byte every `every` seconds."""

    every: float = 0.1


@dataclass(frozen=True)
class HugeNumber:
    """The first vector's first element is an integer no float holds."""


@dataclass(frozen=True)
class Hang:
    seconds: float = 10.0


@dataclass(frozen=True)
class Garbage:
    body: bytes = b"<html>502 Bad Gateway</html>"
    content_encoding: str | None = None


@dataclass(frozen=True)
class Echo:
    """A 500 repeating what it was sent, as some providers' errors do: the inputs (users'
    text), the URL's query and the Authorization header."""


@dataclass(frozen=True)
class NoData:
    """Valid JSON without `data`."""


@dataclass(frozen=True)
class WrongDims:
    dims: int = 1536


@dataclass(frozen=True)
class Fewer:
    """One vector fewer than inputs."""


@dataclass(frozen=True)
class ZeroVector:
    """The first vector is all zeros: no direction to normalise."""


@dataclass(frozen=True)
class Indexed:
    """The inputs' vectors, in order, under these `index` values."""

    indices: tuple[int, ...]


@dataclass(frozen=True)
class Scaled:
    """Succeed's vectors times `factor`: a valid direction of a tiny or huge length."""

    factor: float


@dataclass(frozen=True)
class Booleans:
    """The first vector is JSON booleans."""


Behaviour = (Succeed | Fail | Hang | Garbage | NoData | WrongDims | Fewer | ZeroVector | Indexed
             | Scaled | Booleans | RefuseOptions | BatchLimit | RefuseText | Trickle
             | HugeNumber | Echo)


@dataclass(frozen=True)
class Recorded:
    path: str
    authorization: str | None
    body: Any
    request_id: str | None = None
    query: str = ""
    # Azure OpenAI's classic header for the key.
    api_key: str | None = None


class FakeEmbeddingsServer:
    """POST /v1/embeddings in the OpenAI format, on a free port, in a thread."""

    def __init__(self) -> None:
        self.default: Behaviour = Succeed()
        self.requests: list[Recorded] = []
        self._script: deque[Behaviour] = deque()
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="fake-embeddings", daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def script(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._script.extend(behaviours)

    def next(self, request: Recorded) -> Behaviour:
        with self._lock:
            self.requests.append(request)
            return self._script.popleft() if self._script else self.default

    def __enter__(self) -> FakeEmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    fake: FakeEmbeddingsServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path, _, query = self.path.partition("?")
        if path != "/v1/embeddings":
            self._send(404, b'{"error": {"message": "no such route"}}')
            return
        body = json.loads(raw)
        self._body = body
        fake = self.server.fake
        behaviour = fake.next(Recorded(path, self.headers.get("Authorization"), body,
                                       self.headers.get("X-Request-ID"), query,
                                       self.headers.get("api-key")))
        # A client that timed out has gone away; nothing to tell it.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self._answer(behaviour, body["input"])

    def _answer(self, behaviour: Behaviour, inputs: list[str]) -> None:
        match behaviour:
            case Succeed():
                self._embeddings([raw_vector(t) for t in inputs])
            case Fail(status=status, retry_after=retry_after, retry_after_ms=millis):
                self._send(status, b'{"error": {"message": "scripted failure"}}',
                           retry_after=retry_after, retry_after_ms=millis)
            case RefuseOptions():
                if "dimensions" in self._body:
                    self._send(400, b'{"error": {"message": "Model does not support '
                                    b'matryoshka representation"}}')
                else:
                    self._embeddings([raw_vector(t) for t in inputs])
            case BatchLimit(limit=limit):
                if len(inputs) > limit:
                    self._send(413, b'{"error": "batch size too large", '
                                    b'"error_type": "Validation"}')
                else:
                    self._embeddings([raw_vector(t) for t in inputs])
            case RefuseText(marker=marker, openai=openai):
                if any(marker in t for t in inputs) and openai:
                    self._send(400, b'{"error": {"message": "This model\'s maximum context '
                                    b'length is 8192 tokens, however you requested 9000 '
                                    b'tokens", "type": "invalid_request_error"}}')
                elif any(marker in t for t in inputs):
                    self._send(413, b'{"error": "Input validation error: `inputs` must have '
                                    b'less than 512 tokens", "error_type": "Validation"}')
                else:
                    self._embeddings([raw_vector(t) for t in inputs])
            case Trickle(every=every):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "100000")
                self.end_headers()
                while not self.server.fake.stopping.wait(every):
                    self.wfile.write(b" ")
                    self.wfile.flush()
            case HugeNumber():
                vectors: list[list[Any]] = [raw_vector(t) for t in inputs]
                vectors[0][0] = 10**400  # JSON has no limit; a float does
                self._embeddings(vectors)
            case Hang(seconds=seconds):
                self.server.fake.stopping.wait(seconds)
                self._embeddings([raw_vector(t) for t in inputs])
            case Garbage(body=payload, content_encoding=encoding):
                self._send(200, payload, content_type="text/html", content_encoding=encoding)
            case Echo():
                said = (f"embed exploded on {inputs} for {self.path} "
                        f"auth={self.headers.get('Authorization')}")
                self._send(500, json.dumps({"error": {"message": f"upstream failed: {said}",
                                                      "type": "server_error"},
                                            "detail": said}).encode())
            case NoData():
                self._send(200, b'{"object": "list", "model": "fake", "usage": {}}')
            case WrongDims(dims=dims):
                self._embeddings([raw_vector(t, dims) for t in inputs])
            case Fewer():
                self._embeddings([raw_vector(t) for t in inputs][:-1])
            case ZeroVector():
                vectors = [raw_vector(t) for t in inputs]
                vectors[0] = [0.0] * DIMS
                self._embeddings(vectors)
            case Indexed(indices=indices):
                self._embeddings([raw_vector(t) for t in inputs], indices)
            case Scaled(factor=factor):
                self._embeddings([[x * factor for x in raw_vector(t)] for t in inputs])
            case Booleans():
                flags: list[Any] = [x > 0 for x in raw_vector(inputs[0])]
                self._embeddings([flags, *(raw_vector(t) for t in inputs[1:])])

    def _embeddings(self, vectors: list[list[Any]],
                    indices: Sequence[int] | None = None) -> None:
        data = [{"object": "embedding", "index": i, "embedding": v}
                for i, v in zip(indices or range(len(vectors)), vectors, strict=True)]
        data.reverse()  # OpenAI does not promise order; the client must sort by index
        payload = {
            "object": "list",
            "data": data,
            "model": MODEL,
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }
        self._send(200, json.dumps(payload).encode())

    def _send(self, status: int, payload: bytes, content_type: str = "application/json",
              content_encoding: str | None = None, retry_after: str | None = None,
              retry_after_ms: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if retry_after is not None:
            self.send_header("Retry-After", retry_after)
        if retry_after_ms is not None:
            self.send_header("retry-after-ms", retry_after_ms)
        if content_encoding is not None:
            self.send_header("Content-Encoding", content_encoding)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def server() -> Iterator[FakeEmbeddingsServer]:
    with FakeEmbeddingsServer() as running:
        yield running


def make_embedder(base_url: str, **overrides: Any) -> OpenAIEmbedder:
    options: dict[str, Any] = {
        "base_url": base_url,
        "model": MODEL,
        "api_key": API_KEY,
        "dimensions": DIMS,
        "timeout": TIMEOUT,
        "max_retries": MAX_RETRIES,
        "backoff_base": BACKOFF,
    }
    options.update(overrides)
    return OpenAIEmbedder(**options)


@pytest.fixture
async def embedder(server: FakeEmbeddingsServer) -> AsyncIterator[OpenAIEmbedder]:
    client = make_embedder(server.base_url)
    yield client
    await client.aclose()


def assert_close(got: list[list[float]], expected: list[list[float]]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert len(g) == len(e)
        assert max(abs(a - b) for a, b in zip(g, e, strict=True)) < 1e-9


# The client -------------------------------------------------------------------------------


async def test_sends_an_openai_request_and_returns_normalised_vectors_in_input_order(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    texts = ["Alice likes green tea.", "Bob flies on Monday.", "Carol plays chess."]

    vectors = await embedder.embed(texts)

    [request] = server.requests
    assert request.path == "/v1/embeddings"
    assert request.authorization == f"Bearer {API_KEY}"
    assert request.body["model"] == MODEL
    assert request.body["input"] == texts
    assert request.body["dimensions"] == DIMS
    assert_close(vectors, [unit(raw_vector(t)) for t in texts])
    for vec in vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vec)), 1.0, rel_tol=1e-9)


async def test_large_inputs_are_sent_in_batches_and_reassembled_in_order(
    server: FakeEmbeddingsServer,
) -> None:
    texts = [f"memory number {i}" for i in range(7)]
    embedder = make_embedder(server.base_url, batch_size=3)
    try:
        vectors = await embedder.embed(texts)
    finally:
        await embedder.aclose()

    assert [r.body["input"] for r in server.requests] == [texts[0:3], texts[3:6], texts[6:7]]
    assert_close(vectors, [unit(raw_vector(t)) for t in texts])


async def test_a_call_outside_a_request_sends_no_request_id(
    embedder: OpenAIEmbedder, server: FakeEmbeddingsServer,
) -> None:
    await embedder.embed(["a background job's text"])

    assert server.requests[0].request_id is None


async def test_no_key_sends_no_authorization_header(server: FakeEmbeddingsServer) -> None:
    embedder = make_embedder(server.base_url, api_key=None)
    try:
        await embedder.embed(["x"])
    finally:
        await embedder.aclose()

    assert server.requests[0].authorization is None


async def test_a_failing_answer_is_logged_by_its_message_and_its_body_only_at_debug(
    server: FakeEmbeddingsServer, caplog: pytest.LogCaptureFixture,
) -> None:
    """An observability probe: a provider's 500 echoing its input put users' memory text
    and search queries in the WARNING line, and the URL's credentials in it too; its
    re-probe, an error's message that quoted the request."""
    url = server.base_url.replace("http://", "http://embuser:EMBPASS123@") + "?api-key=QKEY1234"
    embedder = make_embedder(url, api_key=None, max_retries=0)
    server.script(Echo())
    try:
        with caplog.at_level(logging.DEBUG, logger="engram.embedder"), \
                pytest.raises(EmbeddingError):
            await embedder.embed(["Jane's diagnosis is private"])
    finally:
        await embedder.aclose()

    lines = {r.levelname: r.getMessage() for r in caplog.records
             if r.name == "engram.embedder" and "answer" in r.getMessage()}
    # Its error's type only: the message quotes the input too (a re-probe).
    assert lines["WARNING"] == "embeddings API answered 500 (server_error)"
    assert "diagnosis is private" in lines["DEBUG"]  # what the operator asks for, at DEBUG
    assert "diagnosis" not in lines["WARNING"]
    for secret in ("EMBPASS123", "embuser", "QKEY1234",
                   base64.b64encode(b"embuser:EMBPASS123").decode()):
        assert secret not in lines["DEBUG"]


async def sent_once(server: FakeEmbeddingsServer, **settings: Any) -> Recorded:
    """The request an embedder built from the settings sends for one text."""
    embedder = build_embedder(Settings(
        embedder="openai", openai_base_url=server.base_url, openai_api_key=API_KEY,
        openai_embedding_model=MODEL, **settings))
    try:
        await embedder.embed(["x"])
    finally:
        await embedder.aclose()
    [request] = server.requests
    return request


@pytest.mark.parametrize("header", ["api-key", "API-Key"])
async def test_a_key_header_named_in_settings_carries_the_key_as_is(
    server: FakeEmbeddingsServer, header: str
) -> None:
    """Azure OpenAI's classic deployment endpoints take the key in `api-key`, with no
    scheme, and no Authorization header."""
    request = await sent_once(server, openai_api_key_header=header)
    assert request.api_key == API_KEY
    assert request.authorization is None


async def test_the_default_key_header_is_a_bearer_authorization(
    server: FakeEmbeddingsServer,
) -> None:
    request = await sent_once(server)
    assert request.authorization == f"Bearer {API_KEY}"
    assert request.api_key is None


@pytest.mark.parametrize("header", ["", "api key", "api-key:", "x\nInjected: 1"])
def test_a_key_header_that_is_no_header_name_is_refused_naming_the_setting(
    header: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(embedder="openai", openai_api_key=API_KEY, openai_api_key_header=header)
    assert caught.value.errors()[0]["loc"] == ("openai_api_key_header",)


async def test_a_query_is_one_request_with_the_vector_embed_gives_it(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    vector = await embedder.embed_query("what does Alice like")

    assert len(server.requests) == 1
    assert server.requests[0].body["input"] == ["what does Alice like"]
    assert_close([vector], await embedder.embed(["what does Alice like"]))


@pytest.mark.parametrize("status", [500, 429, 503])
async def test_a_retryable_failure_is_retried_then_succeeds(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder, status: int
) -> None:
    server.script(Fail(status))

    vectors = await embedder.embed(["hello"])

    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body
    assert_close(vectors, [unit(raw_vector("hello"))])


async def test_always_500_gives_up_after_bounded_retries(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    server.default = Fail(500)

    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["hello"])

    assert caught.value.code == "embedding_upstream_error"
    assert caught.value.status == 502
    assert len(server.requests) == MAX_RETRIES + 1


EMBEDDING_OUTCOMES = ("ok", "embedding_timeout", "embedding_unavailable",
                      "embedding_upstream_error", "embedding_bad_response")


def embedding_calls() -> dict[str, float]:
    return {o: sample("engram_embedding_calls_total", outcome=o) for o in EMBEDDING_OUTCOMES}


async def test_every_call_is_counted_by_outcome_in_the_metrics(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    before, timed = embedding_calls(), sample("engram_embedding_call_seconds_count")
    server.script(Fail(503), Hang(10.0), Succeed(), Fail(401), NoData())

    await embedder.embed(["hello"])  # 503, timeout, then the answer
    for _ in range(2):  # a 401 (not retried), then an answer without data
        with pytest.raises(EmbeddingError):
            await embedder.embed(["hello"])

    after = embedding_calls()
    assert {o: after[o] - before[o] for o in EMBEDDING_OUTCOMES} == {
        "ok": 1, "embedding_timeout": 1, "embedding_unavailable": 1,
        "embedding_upstream_error": 1, "embedding_bad_response": 1}
    assert sample("engram_embedding_call_seconds_count") - timed == 5


async def test_zero_retries_means_one_attempt(server: FakeEmbeddingsServer) -> None:
    server.default = Fail(500)
    embedder = make_embedder(server.base_url, max_retries=0)
    try:
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()

    assert caught.value.code == "embedding_upstream_error"
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_a_client_error_is_not_retried(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder, status: int
) -> None:
    server.default = Fail(status)

    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["hello"])

    assert caught.value.code == "embedding_upstream_error"
    assert str(status) in caught.value.detail
    # A 400 or 422 is asked once more without `dimensions` and `encoding_format` (the
    # next test); refused again, the first refusal stands and the options stay.
    sent = [r.body for r in server.requests]
    if status in (400, 422):
        assert ["dimensions" in b for b in sent] == [True, False]
    else:
        assert len(sent) == 1
    server.default = Succeed()
    await embedder.embed(["hello"])
    assert "dimensions" in server.requests[-1].body


async def test_options_the_endpoint_refuses_are_left_out_once_it_answers_without_them(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    """An exploratory probe: vLLM answers 400 to `dimensions` for any model not trained
    to shorten its vectors (all-MiniLM-L6-v2 among them), and every write answered 502."""
    server.default = RefuseOptions()

    first = await embedder.embed(["Alice likes green tea."])
    second = await embedder.embed_query("what does Alice like")

    sent = [r.body for r in server.requests]
    assert [("dimensions" in b, "encoding_format" in b) for b in sent] == [
        (True, True), (False, False), (False, False)]
    assert_close(first, [unit(raw_vector("Alice likes green tea."))])
    assert_close([second], [unit(raw_vector("what does Alice like"))])


async def test_a_refusal_not_about_the_options_is_asked_without_them_once_only(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    """A re-probe: a wrong model's 400 cost every call two requests, for ever."""
    server.default = Fail(400)

    for _ in range(3):
        with pytest.raises(EmbeddingError):
            await embedder.embed(["hello"])

    assert ["dimensions" in r.body for r in server.requests] == [True, False, True, True]


async def test_a_failure_of_the_request_without_options_says_more_and_is_told(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    """A re-probe: the first 400 stood whatever came next, so an endpoint answering 503
    with a Retry-After was told as a broken upstream (502)."""
    server.script(Fail(400), Fail(503, retry_after="20"))

    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["hello"])

    assert (caught.value.code, caught.value.status, caught.value.retry_after) == (
        "embedding_unavailable", 503, 20)


async def test_the_wait_a_client_is_told_is_at_most_an_hour(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    server.default = Fail(503, retry_after_ms="1e12")

    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["hello"])

    assert caught.value.retry_after == 3600


async def test_a_batch_refused_as_too_large_goes_in_halves(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    """TEI answers 413 past its batch limit (32 by default, against this client's 64)."""
    server.default = BatchLimit(2)
    texts = [f"memory number {i}" for i in range(5)]

    vectors = await embedder.embed(texts)

    assert [len(r.body["input"]) for r in server.requests] == [5, 2, 3, 1, 2]
    assert_close(vectors, [unit(raw_vector(t)) for t in texts])


async def test_one_text_refused_as_too_large_is_a_422_not_a_broken_upstream(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    server.default = Fail(413)

    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["a text past the model's input"])

    assert (caught.value.code, caught.value.status) == ("embedding_input_too_large", 422)
    assert len(server.requests) == 1


@pytest.mark.parametrize("openai", [False, True], ids=["tei-413", "openai-400"])
async def test_a_text_refused_as_too_large_in_a_batch_is_named_by_its_place(
    server: FakeEmbeddingsServer, openai: bool,
) -> None:
    """A re-probe: one too-long text among 64 failed the batch write with no word of
    which item to shorten. OpenAI and vLLM refuse it with a 400 that says so, which was a
    502, asked again without `dimensions` first."""
    server.default = RefuseText("LONG", openai=openai)
    texts = ["one", "two", "three", "LONG four", "five"]
    embedder = make_embedder(server.base_url, batch_size=2)
    try:
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(texts)
    finally:
        await embedder.aclose()

    assert (caught.value.code, caught.value.status) == ("embedding_input_too_large", 422)
    assert caught.value.input_index == 3
    assert "(text 4 of the 5 sent, counted from 1)" in caught.value.detail
    assert all("dimensions" in r.body for r in server.requests)


async def test_an_answer_trickling_past_the_timeout_is_cut_at_it(
    server: FakeEmbeddingsServer,
) -> None:
    """An exploratory probe: httpx's timeout is per read, and a body sent a byte every
    0.5 s held a write for ever; 64 of them made the service answer 503 to everyone."""
    server.default = Trickle(every=0.05)
    embedder = make_embedder(server.base_url, max_retries=0)
    started = time.monotonic()
    try:
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()

    assert (caught.value.code, caught.value.status) == ("embedding_timeout", 504)
    assert TIMEOUT <= time.monotonic() - started < TIMEOUT + 2


async def test_a_query_in_the_base_url_is_kept(server: FakeEmbeddingsServer) -> None:
    """An exploratory probe: an Azure deployment's `?api-version=` (or a gateway's
    `?api-key=`) went into the path, `/v1?api-version=.../embeddings`, and every call
    answered 404."""
    embedder = make_embedder(server.base_url + "/?api-version=2024-02-01")
    try:
        await embedder.embed(["hello"])
    finally:
        await embedder.aclose()

    [request] = server.requests
    assert (request.path, request.query) == ("/v1/embeddings", "api-version=2024-02-01")


async def test_an_unavailable_endpoint_is_told_as_503_with_its_retry_after(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    """TEI and Ollama answer 503 while their model loads; a 502 told the client the
    upstream was broken, and its Retry-After was lost."""
    server.default = Fail(503, retry_after="30")

    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["hello"])

    assert (caught.value.code, caught.value.status, caught.value.retry_after) == (
        "embedding_unavailable", 503, 30)
    assert len(server.requests) == 1  # longer than this client waits: not retried


async def test_a_retry_after_in_milliseconds_is_waited_for(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    server.script(Fail(429, retry_after_ms="300"))
    started = time.monotonic()

    await embedder.embed(["hello"])

    assert len(server.requests) == 2
    assert time.monotonic() - started >= 0.3


async def test_a_number_no_float_holds_is_a_bad_response(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    server.default = HugeNumber()

    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["hello"])

    assert caught.value.code == "embedding_bad_response"


async def test_a_hang_past_the_timeout_is_an_embedding_timeout_quickly(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    server.default = Hang(10.0)

    started = time.monotonic()
    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["hello"])
    elapsed = time.monotonic() - started

    assert caught.value.code == "embedding_timeout"
    assert caught.value.status == 504
    # Every attempt is cut at the client timeout, nowhere near the server's 10 s.
    assert len(server.requests) == MAX_RETRIES + 1
    assert elapsed < (MAX_RETRIES + 1) * TIMEOUT + 2.0


async def test_one_hang_then_success_is_retried(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder
) -> None:
    server.script(Hang(10.0))

    vectors = await embedder.embed(["hello"])

    assert len(server.requests) == 2
    assert_close(vectors, [unit(raw_vector("hello"))])


async def test_an_unreachable_server_is_embedding_unavailable() -> None:
    embedder = make_embedder(closed_port_url())
    try:
        with pytest.raises(EmbeddingError) as caught:
            await embedder.embed(["hello"])
    finally:
        await embedder.aclose()

    assert caught.value.code == "embedding_unavailable"
    assert caught.value.status == 503
    assert caught.value.retry_after == 1  # as a database out of reach: come back soon


async def test_a_rate_limit_asking_a_long_wait_is_not_waited_for_and_passed_on(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder,
) -> None:
    """A 429 with Retry-After: 30 held the request ~20 s (its retries waited the 10 s cap
    each), then answered 502 without a Retry-After: the client neither got an early
    answer nor knew when to come back."""
    server.default = Fail(429, retry_after="30")

    started = time.monotonic()
    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["hello"])

    assert time.monotonic() - started < 2
    assert len(server.requests) == 1
    assert (caught.value.code, caught.value.status, caught.value.retry_after) == (
        "embedding_rate_limited", 503, 30)


@pytest.mark.parametrize("retry_after", [None, "0", "inf", "soon"])
async def test_a_rate_limit_is_retried_then_told_as_503_with_a_retry_after(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder, retry_after: str | None,
) -> None:
    server.default = Fail(429, retry_after=retry_after)

    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["hello"])

    assert len(server.requests) == MAX_RETRIES + 1
    assert (caught.value.code, caught.value.status, caught.value.retry_after) == (
        "embedding_rate_limited", 503, 1)


@pytest.mark.parametrize(
    "behaviour",
    [Garbage(), Garbage(b""), NoData(), WrongDims(1536), WrongDims(383), Fewer(), ZeroVector(),
     Garbage(b'{"data": []}', content_encoding="gzip"), Garbage(b"[" * 100_000 + b"]" * 100_000),
     Indexed((0, 0)), Indexed((1, 2)), Booleans()],
    ids=["html", "empty-body", "no-data", "too-wide", "too-narrow", "fewer-vectors", "zero-vector",
         "wrong-content-encoding", "nested-too-deep",
         # Two vectors under one index were stored against each other's texts.
         "an-index-twice", "indices-from-1", "booleans"],
)
async def test_a_malformed_answer_is_embedding_bad_response(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder, behaviour: Behaviour
) -> None:
    server.default = behaviour

    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["first text", "second text"])

    assert caught.value.code == "embedding_bad_response"
    assert caught.value.status == 502
    # A bounded number of calls, whatever the client's retry policy for bad answers.
    assert 1 <= len(server.requests) <= MAX_RETRIES + 1


@pytest.mark.parametrize("factor", [1e-200, 1e200])
async def test_a_vector_of_a_tiny_or_huge_length_keeps_its_direction(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder, factor: float,
) -> None:
    """Its squares under- or overflowed: refused as "zero or non-finite"."""
    server.default = Scaled(factor)

    vectors = await embedder.embed(["first text", "second text"])

    for vector, text in zip(vectors, ["first text", "second text"], strict=True):
        assert vector == pytest.approx(unit(raw_vector(text)), abs=1e-9)


# Through the memory API --------------------------------------------------------------------


@pytest.fixture
async def openai_resources(
    resources: Resources, server: FakeEmbeddingsServer
) -> AsyncIterator[Resources]:
    embedder = make_embedder(server.base_url)
    yield dataclasses.replace(resources, embedder=embedder)
    await embedder.aclose()


async def test_the_api_stores_a_memory_with_the_providers_vector(
    openai_resources: Resources, server: FakeEmbeddingsServer
) -> None:
    tenant = await create_tenant_key(openai_resources)
    async with make_client(openai_resources, tenant.headers) as client:
        resp = await client.post("/v1/memories", json={"content": "Alice likes green tea."})

    assert resp.status_code == 201, resp.text
    assert server.requests[-1].body["input"] == ["Alice likes green tea."]
    # A generated request id, passed on: the provider's logs lead back to the request.
    assert server.requests[-1].request_id == resp.headers["x-request-id"]
    async with openai_resources.sessionmaker() as session:
        stored = await session.scalar(
            select(Memory.embedding).where(
                Memory.tenant_id == tenant.tenant_id, Memory.id == uuid.UUID(resp.json()["id"])
            )
        )
    expected = unit(raw_vector("Alice likes green tea."))
    got = [float(x) for x in stored]
    assert len(got) == DIMS
    # halfvec keeps about three significant digits.
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) < 2e-3


FAILURES = [  # (what the endpoint does, the status, the code, the Retry-After told)
    pytest.param(Fail(500), 502, "embedding_upstream_error", None, id="upstream-500"),
    pytest.param(Fail(400), 502, "embedding_upstream_error", None, id="upstream-400"),
    pytest.param(Garbage(), 502, "embedding_bad_response", None, id="garbage"),
    pytest.param(WrongDims(1536), 502, "embedding_bad_response", None, id="wrong-dims"),
    pytest.param(Hang(10.0), 504, "embedding_timeout", None, id="hang"),
    pytest.param(None, 503, "embedding_unavailable", "1", id="unreachable"),
    pytest.param(Fail(429, retry_after="30"), 503, "embedding_rate_limited", "30",
                 id="rate-limited"),
    pytest.param(Fail(503, retry_after="20"), 503, "embedding_unavailable", "20",
                 id="model-loading"),
    pytest.param(Fail(413), 422, "embedding_input_too_large", None, id="too-large"),
    pytest.param(RefuseText("Alice", openai=True), 422, "embedding_input_too_large", None,
                 id="past-the-context-length"),
]


@pytest.mark.parametrize(("behaviour", "status", "code", "wait"), FAILURES)
@pytest.mark.parametrize("path", ["/v1/memories", "/v1/memories/batch"])
async def test_a_failing_provider_is_a_stable_problem_and_writes_nothing(
    resources: Resources,
    server: FakeEmbeddingsServer,
    behaviour: Behaviour | None,
    status: int,
    code: str,
    wait: str | None,
    path: str,
) -> None:
    if behaviour is None:
        embedder = make_embedder(closed_port_url())
    else:
        server.default = behaviour
        embedder = make_embedder(server.base_url)
    res = dataclasses.replace(resources, embedder=embedder)
    tenant = await create_tenant_key(res)
    item = {"content": "Alice likes green tea."}
    body = item if path == "/v1/memories" else {"items": [item, {"content": "and coffee"}]}
    try:
        async with make_client(res, tenant.headers) as client:
            resp = await client.post(path, json=body, headers={"Idempotency-Key": "k-1"})

            assert resp.status_code == status, resp.text
            assert resp.headers["content-type"].startswith("application/problem+json")
            problem = resp.json()
            assert problem["type"] == f"https://engram.dev/problems/{code}"
            assert problem["status"] == status
            assert problem["title"]
            assert problem["detail"]
            assert "Traceback" not in resp.text
            # When waiting helps, the client is told how long.
            assert resp.headers.get("retry-after") == wait

            listed = await client.get("/v1/memories")
            assert listed.status_code == 200
            assert listed.json()["items"] == []

            # The failed attempt left no idempotency claim behind: once the provider
            # works, the same key creates the memory instead of replaying the failure.
            server.default = Succeed()
            working = make_embedder(server.base_url)
            res.embedder = working
            retry = await client.post(path, json=body, headers={"Idempotency-Key": "k-1"})
            await working.aclose()
            assert retry.status_code == 201, retry.text
            assert "Idempotent-Replayed" not in retry.headers
    finally:
        await embedder.aclose()


async def test_a_timeout_while_changing_content_is_a_504_and_changes_nothing(
    resources: Resources, server: FakeEmbeddingsServer
) -> None:
    embedder = make_embedder(server.base_url)
    res = dataclasses.replace(resources, embedder=embedder)
    tenant = await create_tenant_key(res)
    try:
        async with make_client(res, tenant.headers) as client:
            created = await client.post("/v1/memories", json={"content": "old text"})
            assert created.status_code == 201, created.text
            memory = created.json()

            server.default = Hang(10.0)
            resp = await client.patch(f"/v1/memories/{memory['id']}",
                                      json={"content": "new text", "tags": ["x"]})

            assert resp.status_code == 504, resp.text
            assert resp.headers["content-type"].startswith("application/problem+json")
            assert resp.json()["type"] == "https://engram.dev/problems/embedding_timeout"
            assert (await client.get(f"/v1/memories/{memory['id']}")).json() == memory
    finally:
        await embedder.aclose()


@pytest.mark.parametrize(("behaviour", "status", "code"), [
    pytest.param(Fail(500), 502, "embedding_upstream_error", id="upstream-500"),
    pytest.param(Garbage(), 502, "embedding_bad_response", id="garbage"),
    pytest.param(Hang(10.0), 504, "embedding_timeout", id="hang"),
])
async def test_a_search_whose_embedding_fails_is_a_problem_and_runs_no_vector_statement(
    resources: Resources, server: FakeEmbeddingsServer,
    behaviour: Behaviour, status: int, code: str,
    search_statements: list[tuple[str, tuple[Any, ...]]],
) -> None:
    """A failed embedding answers with the provider's problem. The full-text statement
    that runs beside the embedding is cancelled or finished, the vector statement never
    runs, and the next search works on the same pool."""
    embedder = make_embedder(server.base_url)
    res = dataclasses.replace(resources, embedder=embedder)
    tenant = await create_tenant_key(res)

    try:
        async with make_client(res, tenant.headers) as client:
            created = await client.post("/v1/memories", json={"content": "Alice likes tea"})
            assert created.status_code == 201, created.text

            server.default = behaviour
            search_statements.clear()
            resp = await client.post("/v1/search", json={"query": "what does Alice like"})
            assert resp.status_code == status, resp.text
            assert resp.headers["content-type"].startswith("application/problem+json")
            assert resp.json()["type"] == f"https://engram.dev/problems/{code}"
            assert [s for s, _ in search_statements if "term_stats" in s], search_statements
            assert not [s for s, _ in search_statements if "vec_ann" in s]

            server.default = Succeed()
            ok = await client.post("/v1/search", json={"query": "what does Alice like"})
            assert ok.status_code == 200, ok.text
            assert [r["memory"]["id"] for r in ok.json()["results"]] == [created.json()["id"]]
    finally:
        await embedder.aclose()


async def test_a_search_asked_again_reuses_its_query_vector_but_not_a_failure(
    resources: Resources, server: FakeEmbeddingsServer
) -> None:
    """The same question asked again is answered without a call to the embeddings
    endpoint (app/search/query_vectors.py), with the same results; a question whose
    embedding failed is embedded again; another tenant's same question is its own."""
    embedder = make_embedder(server.base_url)
    res = dataclasses.replace(resources, embedder=embedder)
    tenant, other = await create_tenant_key(res), await create_tenant_key(res)
    query = {"query": "what does Alice like to drink"}

    def query_calls() -> int:
        return sum(r.body["input"] == [query["query"]] for r in server.requests)

    try:
        async with make_client(res, tenant.headers) as client:
            created = await client.post("/v1/memories", json={"content": "Alice likes tea"})
            assert created.status_code == 201, created.text
            hits = sample("engram_search_query_vectors_total", outcome="hit")

            first = await client.post("/v1/search", json=query)
            again = await client.post("/v1/search", json=query)

            assert first.status_code == again.status_code == 200, (first.text, again.text)
            for answer in (first, again):
                (only,) = answer.json()["results"]
                assert only["memory"] == created.json()
            # Equal but for the recency term, which moves with the clock.
            assert again.json()["results"][0]["score"] == pytest.approx(
                first.json()["results"][0]["score"], abs=1e-6)
            assert query_calls() == 1
            assert sample("engram_search_query_vectors_total", outcome="hit") == hits + 1

            server.default = Fail(500)
            failed = await client.post("/v1/search", json={"query": "and to eat"})
            assert failed.status_code == 502, failed.text
            calls = len(server.requests)
            server.default = Succeed()
            retried = await client.post("/v1/search", json={"query": "and to eat"})
            assert retried.status_code == 200, retried.text
            assert len(server.requests) == calls + 1

        async with make_client(res, other.headers) as other_client:
            theirs = await other_client.post("/v1/search", json=query)
            assert theirs.status_code == 200, theirs.text
            assert theirs.json()["results"] == []
            assert query_calls() == 2
    finally:
        await embedder.aclose()


async def test_a_failing_endpoint_is_said_at_start_in_one_warning(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder, caplog: pytest.LogCaptureFixture,
) -> None:
    """Noticed in stop 38: a wrong URL, key or model was first said by every write's and
    search's 502. Not a refusal: the endpoint may only be down for now."""
    server.script(Fail(401))

    with caplog.at_level(logging.WARNING):
        await probe_embedder(embedder)

    [line] = [r.getMessage() for r in caplog.records if "failed a probe at start" in
              r.getMessage()]
    assert line.startswith(f"the embeddings endpoint {server.base_url}")
    assert "(embedding_upstream_error: " in line
    assert line.endswith("writes and searches answer 502 until it answers")
    # Once it answers, it embeds.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        await probe_embedder(embedder)
    assert not [r for r in caplog.records if "failed a probe" in r.getMessage()]
    assert len(await embedder.embed(["hello"])) == 1


async def test_the_start_warning_leaves_the_urls_credentials_out(
    server: FakeEmbeddingsServer, caplog: pytest.LogCaptureFixture,
) -> None:
    """A re-probe: the warning named the endpoint with its `user:password@` and its
    `?api-key=` in clear (the log filter covers the HTTP clients' own lines only)."""
    server.script(Fail(401))
    secret = server.base_url.replace("http://", "http://svc:PASSWORDX@") + "?api-key=KEYX"
    embedder = make_embedder(secret)
    try:
        with caplog.at_level(logging.WARNING):
            await probe_embedder(embedder)
    finally:
        await embedder.aclose()

    [line] = [r.getMessage() for r in caplog.records if "failed a probe at start" in
              r.getMessage()]
    assert "PASSWORDX" not in line
    assert "KEYX" not in line
    assert "http://<redacted>@127.0.0.1" in line
    assert server.requests[0].query == "api-key=KEYX"  # still sent as given


def test_a_provider_code_echoing_the_key_is_masked_at_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by an exploratory probe: a provider answering 500 with the key as its error's
    code put it at WARNING, as the words of a code ("sk-secret-123, server_error")."""
    body = json.dumps({"error": {"code": API_KEY, "type": "server_error"}}).encode()
    logger = logging.getLogger("engram.embedder")
    with caplog.at_level(logging.WARNING, logger="engram.embedder"):
        log_unexpected_answer(logger, "embeddings API answered 500", "its answer", body,
                              limit=200, api_key=API_KEY, secrets=())

    [line] = [r.getMessage() for r in caplog.records if r.name == "engram.embedder"]
    assert API_KEY not in line
    assert line == f"embeddings API answered 500 ({MASK}, server_error)"


async def test_a_bad_answer_quotes_none_of_its_values_to_the_client(
    server: FakeEmbeddingsServer, embedder: OpenAIEmbedder,
) -> None:
    """Found by an exploratory probe: a 200 whose vector held a string quoting the key and
    the input had it in the problem detail a tenant reads."""
    quoted = f"upstream error: invalid key {API_KEY} for text: my private diary text"
    server.default = Garbage(json.dumps(
        {"data": [{"index": 0, "embedding": [quoted, *([0.1] * 383)]}]}).encode())

    with pytest.raises(EmbeddingError) as caught:
        await embedder.embed(["my private diary text"])

    assert caught.value.code == "embedding_bad_response"
    assert API_KEY not in caught.value.detail
    assert "diary" not in caught.value.detail
    assert "a vector holds a string, not a number" in caught.value.detail


async def test_a_hanging_endpoint_holds_the_start_a_few_seconds_at_most(
    server: FakeEmbeddingsServer, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by an exploratory probe: with the defaults (10 s, 2 retries) a hanging
    endpoint held the service's start 33 s, and a SIGTERM meanwhile waited for it."""
    monkeypatch.setattr(openai_embedder, "PROBE_SECONDS", 0.3)
    server.default = Hang(5.0)
    embedder = make_embedder(server.base_url, timeout=2.0, max_retries=2)
    try:
        with caplog.at_level(logging.WARNING):
            await probe_embedder(embedder)
    finally:
        await embedder.aclose()

    assert len(server.requests) == 1  # cut in its first try, not after three of 2 s
    [line] = [r.getMessage() for r in caplog.records if "did not answer a probe" in
              r.getMessage()]
    assert line.endswith("within 0.3 s; the service starts, and each request tries it again")


async def test_refusals_the_client_answers_itself_are_counted_apart(
    server: FakeEmbeddingsServer,
) -> None:
    """Found by an exploratory probe: TEI's 413 to a batch past its 32 inputs, sent again
    in halves, counted embedding_upstream_error though the write succeeded, as did the
    400 to `dimensions` asked again without it."""
    outcomes = ("ok", "batch_split", "options_refused", "embedding_upstream_error")
    before = {o: sample("engram_embedding_calls_total", outcome=o) for o in outcomes}
    server.default = BatchLimit(2)
    split = make_embedder(server.base_url, batch_size=4)
    try:
        assert len(await split.embed(["a", "b", "c", "d"])) == 4
    finally:
        await split.aclose()
    server.default = RefuseOptions()
    plain = make_embedder(server.base_url)
    try:
        assert len(await plain.embed(["e"])) == 1
    finally:
        await plain.aclose()

    after = {o: sample("engram_embedding_calls_total", outcome=o) for o in outcomes}
    assert {o: after[o] - before[o] for o in outcomes} == {
        "ok": 3, "batch_split": 1, "options_refused": 1, "embedding_upstream_error": 0}
