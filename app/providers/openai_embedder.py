"""An embedder for any OpenAI-compatible `/embeddings` endpoint, over httpx.

Timeouts, 429 and 5xx answers are retried a bounded number of times with backoff;
what still fails becomes a provider error with a stable code, never a bare 500. Each
attempt is bounded end to end by `timeout`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Sequence
from typing import Any

import httpx

from app.errors import ProviderError
from app.providers.answer_preview import log_unexpected_answer, secrets_of
from app.providers.embedder import Vector
from app.providers.endpoint_url import endpoint_url
from app.providers.key_header import BEARER, key_headers
from app.providers.retry_after import retry_after_seconds
from app.service.log_format import redact_urls
from app.service.metrics import EMBEDDING_CALLS, EMBEDDING_SECONDS
from app.service.request_id import outgoing

log = logging.getLogger("engram.embedder")

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_RETRY_AFTER = 10.0
MAX_TOLD_RETRY_AFTER = 3600
"""The longest wait a client is told: an endpoint's Retry-After of a year is passed on as
an hour (a re-probe: `retry-after-ms: 1e308` was told as a 306-digit number)."""


class EmbeddingError(ProviderError):
    code = "embedding_error"
    title = "Embedding provider failed"

    def __init__(self, detail: str, *, code: str, status: int = 502,
                 retry_after: int | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.status = status
        # Told to the client (Retry-After) when waiting helps: an endpoint out of reach
        # or rate limiting.
        self.retry_after = retry_after
        # Of a text refused alone (embedding_input_too_large): its place in the call.
        self.input_index: int | None = None


PROBE_TEXT = "Engram checks that its embeddings endpoint answers."
PROBE_SECONDS = 5.0
"""The longest the start's probe waits, whatever the timeout and retries: with the
defaults (10 s, 2 retries) a hanging endpoint held the start 33 s, and a SIGTERM meanwhile
waited for it (31 s, past a container's grace; an exploratory probe)."""


class OpenAIEmbedder:
    name = "openai"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        dimensions: int,
        key_header: str = BEARER,
        timeout: float = 10.0,
        max_retries: int = 2,
        batch_size: int = 256,
        backoff_base: float = 0.25,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.dimensions = dimensions
        self._model = model
        self.vector_space = model
        self._max_retries = max_retries
        self._batch_size = batch_size
        self._backoff_base = backoff_base
        self._timeout = timeout
        self._url = endpoint_url(base_url, "embeddings")
        self._headers = key_headers(api_key, key_header)
        self._api_key = api_key
        self._secrets = secrets_of(base_url)
        # `dimensions` and `encoding_format` are sent until the endpoint refuses them
        # and answers without them (see _without_options), which is asked once.
        self._options = True
        self._asked_without = False
        self._client = client or httpx.AsyncClient(timeout=timeout)

    async def probe(self) -> None:
        """One text embedded at the service's start: a wrong URL, key, model or dimension
        is said at once, in one WARNING line, rather than first by every write's and
        search's 502. Not a refusal to start: the endpoint may only be down for now, and
        it is tried again with each request."""
        try:
            async with asyncio.timeout(min(PROBE_SECONDS, self._timeout)):
                await self.embed([PROBE_TEXT])
        except EmbeddingError as exc:
            log.warning("the embeddings endpoint %s failed a probe at start (%s: %s); "
                        "writes and searches answer %d until it answers",
                        redact_urls(str(self._url)), exc.code, exc.detail, exc.status)
        except TimeoutError:
            log.warning("the embeddings endpoint %s did not answer a probe at start within "
                        "%g s; the service starts, and each request tries it again",
                        redact_urls(str(self._url)), min(PROBE_SECONDS, self._timeout))

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        out: list[Vector] = []
        try:
            for start in range(0, len(texts), self._batch_size):
                out.extend(await _placed(
                    self._embed_chunk(list(texts[start : start + self._batch_size])), start))
        except EmbeddingError as exc:
            if exc.input_index is None or len(texts) == 1:
                raise
            # Which of a batch's texts: a batch write is refused whole, and its client
            # had no way to tell which item to shorten (a re-probe).
            told = EmbeddingError(f"{exc.detail} (text {exc.input_index + 1} of the "
                                  f"{len(texts)} sent, counted from 1)", code=exc.code,
                                  status=exc.status, retry_after=exc.retry_after)
            told.input_index = exc.input_index
            raise told from exc
        return out

    async def embed_query(self, text: str) -> Vector:
        # Each call is its own HTTP request: nothing here queues a query behind writes.
        (vector,) = await self._embed_chunk([text])
        return vector

    def _payload(self, texts: list[str], options: bool) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self._model, "input": texts}
        if options:
            payload |= {"dimensions": self.dimensions, "encoding_format": "float"}
        return payload

    async def _post(self, payload: dict[str, Any]) -> httpx.Response:
        # httpx's timeout is per read: a server trickling its answer a byte at a time
        # held a write for ever, and 64 of them made the service answer 503 to everyone
        # (an exploratory probe).
        async with asyncio.timeout(self._timeout):
            return await self._client.post(self._url, json=payload,
                                           headers={**self._headers, **outgoing()})

    async def _embed_chunk(self, texts: list[str], options: bool | None = None
                           ) -> list[Vector]:
        options = self._options if options is None else options
        payload = self._payload(texts, options)
        attempt = 0
        while True:
            retry_after: float | None = None
            started = time.perf_counter()
            try:
                response = await self._post(payload)
            except (TimeoutError, httpx.TimeoutException) as exc:
                error = EmbeddingError(
                    f"the embeddings API did not answer within {self._timeout:g}s "
                    f"({exc.__class__.__name__})", code="embedding_timeout", status=504)
            except httpx.TransportError as exc:
                error = EmbeddingError(f"the embeddings API could not be reached: {exc}",
                                       code="embedding_unavailable", status=503,
                                       retry_after=1)
            except httpx.HTTPError as exc:
                # The answer came, but not as HTTP can read it (a Content-Encoding the
                # body is not in): a bad response, as a malformed body is, not retried.
                error = EmbeddingError(f"the embeddings API's answer could not be decoded: "
                                       f"{exc.__class__.__name__}: {exc}",
                                       code="embedding_bad_response")
                _count(started, error.code)
                raise error from exc
            else:
                if response.status_code == 200:
                    try:
                        vectors = self._parse(response, len(texts))
                    except EmbeddingError as exc:
                        _count(started, exc.code)
                        raise
                    _count(started, "ok")
                    return vectors
                # The body stays in the log (app/providers/answer_preview.py).
                log_unexpected_answer(
                    log, f"embeddings API answered {response.status_code}",
                    "the embeddings API's answer", response.text, limit=500,
                    api_key=self._api_key, secrets=self._secrets)
                retry_after = retry_after_seconds(response)
                too_large = _too_large(response)
                error = _answered(response.status_code, retry_after, len(texts), too_large)
                if response.status_code not in RETRYABLE_STATUS:
                    # A refusal the client answers itself is counted as what it is: as
                    # embedding_upstream_error, TEI's 413 to every batch past 32 texts
                    # looked like the failures that fail a write (an exploratory probe).
                    if too_large and len(texts) > 1:
                        _count(started, "batch_split")
                        return await self._split(texts, response.status_code)
                    if (response.status_code in (400, 422) and not too_large and options
                            and not self._asked_without):
                        _count(started, "options_refused")
                        return await self._without_options(texts, error)
                    _count(started, error.code)
                    raise error
            _count(started, error.code)
            if retry_after is not None and retry_after > MAX_RETRY_AFTER:
                # Waiting that long would hold the request (and its client) past any
                # sense; the client is told when to come back instead.
                log.warning("embeddings API asked to wait %gs, longer than the %gs this "
                            "client waits; not retried", retry_after, MAX_RETRY_AFTER)
                raise error
            if attempt >= self._max_retries:
                raise error
            delay = self._backoff_base * (2**attempt)
            if retry_after is not None:
                delay = min(max(delay, retry_after), MAX_RETRY_AFTER)
            log.warning("embeddings call failed (%s), retry %d in %.2fs",
                        error.code, attempt + 1, delay)
            await asyncio.sleep(delay)
            attempt += 1

    async def _split(self, texts: list[str], status: int) -> list[Vector]:
        """A batch the endpoint refused as too large (413: TEI's limit of 32 inputs
        against this client's 64; or one text past the model's, OpenAI's and vLLM's 400
        too): in halves, so a batch goes through in what the endpoint takes and a
        too-long text is refused alone."""
        half = len(texts) // 2
        log.warning("the embeddings API refused %d inputs as too large (%d); sending "
                    "them in halves (ENGRAM_EMBEDDER_BATCH_SIZE sets how many go at once)",
                    len(texts), status)
        return [*await self._embed_chunk(texts[:half]),
                *await _placed(self._embed_chunk(texts[half:]), half)]

    async def _without_options(self, texts: list[str], error: EmbeddingError) -> list[Vector]:
        """A 400 or 422 to a request with `dimensions` and `encoding_format`: vLLM
        refuses `dimensions` for every model not trained to shorten its vectors
        (all-MiniLM-L6-v2 among them), OpenAI's ada-002 too, and some servers refuse
        `encoding_format`. Asked once without them; when that answers, they are left
        out from then on (the vectors' length is still checked). When it does not, it is
        not asked again (a wrong model's 400 cost every call two), and the first refusal
        stands when the second is one too; another failure (the endpoint's 503, a
        dimension it cannot give) says more, and is the one raised."""
        self._asked_without = True
        try:
            vectors = await self._embed_chunk(texts, options=False)
        except EmbeddingError as plain:
            if plain.code == "embedding_upstream_error":
                raise error from None
            raise
        self._options = False
        log.warning("the embeddings API refused `dimensions` / `encoding_format` and "
                    "answered without them; they are no longer sent")
        return vectors

    def _parse(self, response: httpx.Response, expected: int) -> list[Vector]:
        try:
            body: Any = response.json()
            data = sorted(body["data"], key=lambda item: item["index"])
            vectors = [[_number(x) for x in item["embedding"]] for item in data]
        except (ValueError, KeyError, TypeError, RecursionError, OverflowError) as exc:
            raise EmbeddingError(f"the embeddings API answered malformed JSON: {exc!r}",
                                 code="embedding_bad_response") from exc
        if len(vectors) != expected:
            raise EmbeddingError(
                f"the embeddings API returned {len(vectors)} vectors for {expected} inputs",
                code="embedding_bad_response")
        # Two vectors under one index (and none under another) would be stored against
        # each other's texts: the index is the only tie from a vector to its input.
        if [item["index"] for item in data] != list(range(expected)):
            raise EmbeddingError(
                "the embeddings API's `index` fields are not each input's position once",
                code="embedding_bad_response")
        for vec in vectors:
            if len(vec) != self.dimensions:
                raise EmbeddingError(
                    f"the embeddings API returned {len(vec)} dimensions, the schema stores "
                    f"{self.dimensions}; choose a model that supports `dimensions`",
                    code="embedding_bad_response")
        return [_normalise(v) for v in vectors]

    async def aclose(self) -> None:
        await self._client.aclose()


async def _placed(call: Awaitable[list[Vector]], offset: int) -> list[Vector]:
    """`call`'s vectors; a text it refused alone is placed `offset` further on."""
    try:
        return await call
    except EmbeddingError as exc:
        if exc.input_index is not None:
            exc.input_index += offset
        raise


CONTEXT_LENGTH = "maximum context length"
"""How OpenAI and vLLM word the 400 to a text past the model's input ("This model's
maximum context length is 8192 tokens, however you requested ...")."""


def _too_large(response: httpx.Response) -> bool:
    """An answer refusing the input as too large: TEI's 413, OpenAI's and vLLM's 400."""
    if response.status_code == 413:
        return True
    return response.status_code == 400 and CONTEXT_LENGTH in response.text[:2000].lower()


def _answered(status: int, retry_after: float | None, inputs: int,
              too_large: bool = False) -> EmbeddingError:
    wait = min(max(1, math.ceil(retry_after or 1)), MAX_TOLD_RETRY_AFTER)
    if status == 429:
        # The endpoint's limit, not a fault: 503 with its Retry-After, so a client backs
        # off, where a 502 says the upstream is broken.
        return EmbeddingError("the embeddings API is rate limiting this service (429)",
                              code="embedding_rate_limited", status=503, retry_after=wait)
    if status == 503:
        # Unavailable for now (TEI and Ollama while their model loads), as it says.
        return EmbeddingError("the embeddings API is unavailable for now (503)",
                              code="embedding_unavailable", status=503, retry_after=wait)
    if too_large and inputs == 1:
        # A text past the model's input (TEI, OpenAI and vLLM refuse, where the local
        # model truncates): no retry will take it, and a 502 is retried for ever.
        refused = EmbeddingError(f"the embeddings API refused the text as too large for "
                                 f"its model ({status}); shorten it, or have the endpoint "
                                 "truncate", code="embedding_input_too_large", status=422)
        refused.input_index = 0
        return refused
    return EmbeddingError(f"the embeddings API answered {status}",
                          code="embedding_upstream_error", status=502)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object" if isinstance(value, dict) else "non-number"


def _number(value: Any) -> float:
    # float() takes true and "0.5" too: neither is a JSON number.
    if isinstance(value, bool) or not isinstance(value, int | float):
        # Its type only: the value is the provider's text, which went into the client's
        # problem detail, quoting the key or the input it echoed (an exploratory probe).
        raise TypeError(f"a vector holds a {_json_type(value)}, not a number")
    return float(value)


def _normalise(vec: Vector) -> Vector:
    # Scaled by the largest magnitude first: the squares of 1e-200 (or 1e200) under- (or
    # over-)flow, which made a valid direction look like a zero (or infinite) vector.
    scale = max((abs(x) for x in vec), default=0.0)
    if not math.isfinite(scale) or scale == 0.0:
        raise EmbeddingError("the embeddings API returned a zero or non-finite vector",
                             code="embedding_bad_response")
    vec = [x / scale for x in vec]
    norm = math.sqrt(sum(x * x for x in vec))
    if not math.isfinite(norm) or norm == 0.0:
        raise EmbeddingError("the embeddings API returned a zero or non-finite vector",
                             code="embedding_bad_response")
    return [x / norm for x in vec]


def _count(started: float, outcome: str) -> None:
    EMBEDDING_CALLS.labels(outcome).inc()
    EMBEDDING_SECONDS.observe(time.perf_counter() - started)
