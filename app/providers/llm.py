"""The LLM client: the `LLMClient` protocol ops depend on, and an httpx client for any
OpenAI-compatible `/chat/completions` endpoint.

Timeouts, connection errors, 429 and 5xx answers are retried a bounded number of times
with exponential backoff; what still fails, and any answer that is not a well-formed
completion (one HTTP cannot decode, JSON too deep to parse, a body past
`MAX_ANSWER_BYTES`), becomes an `LLMError` with a stable code, never a bare exception.
At most `max_in_flight` calls of the process are under way at once, whoever makes them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from typing import Any, Protocol

import httpx

from app.errors import ProviderError
from app.providers.answer_preview import log_unexpected_answer, secrets_of
from app.providers.endpoint_url import endpoint_url
from app.providers.key_header import BEARER, key_headers
from app.providers.retry_after import retry_after_seconds
from app.service.metrics import LLM_CALLS, LLM_SECONDS
from app.service.request_id import outgoing
from app.settings import Settings

log = logging.getLogger("engram.llm")

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
INCOMPLETE = frozenset({"length", "max_tokens", "content_filter", "safety", "recitation"})
"""The `finish_reason`s of an answer that is not the whole of one, lower-cased: OpenAI's,
and what gateways pass on of Anthropic's and Gemini's ("MAX_TOKENS", "SAFETY")."""
MAX_ANSWER_BYTES = 2**20
"""A completion is read no further: a summary is at most 32,768 characters, ~200 KB as
JSON at worst, and an answer of tens of MB held the event loop for over a second."""


class _TooLarge(Exception):
    pass


class LLMClient(Protocol):
    """What ops need from a language model: one system + user prompt in, text out.

    An empty string is a valid answer here; callers decide what an empty answer means.
    """

    async def complete(self, system: str, user: str) -> str: ...


class LLMError(ProviderError):
    """The LLM failed, timed out or answered something that is not a completion.

    `code` is stable: llm_timeout, llm_connection_error, llm_http_error,
    llm_bad_response, llm_incomplete (and llm_not_configured, raised by callers with no
    client).
    """

    code = "llm_error"
    title = "LLM provider failed"

    def __init__(
        self, detail: str, *, code: str, status: int = 502, http_status: int | None = None
    ) -> None:
        super().__init__(detail)
        self.code = code
        self.status = status
        self.http_status = http_status
        # The LLM's Retry-After on the last attempt, in seconds: a caller that tries
        # again later (a session's fold) waits at least that long. (`retry_after` is the
        # service's own answer's.)
        self.provider_retry_after: float | None = None

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}"


class ChatCompletionsClient:
    """`LLMClient` over POST {base_url}/chat/completions.

    `timeout` bounds each attempt end to end (httpx's own timeouts are per phase, so a
    server trickling bytes could otherwise hold a call forever).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        key_header: str = BEARER,
        timeout: float = 30.0,
        max_retries: int = 2,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        max_in_flight: int = 16,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        # A run's groups and an op's entries multiply (4 groups x 32 entries of an
        # abstractive op was 128 calls at once): this bounds what the provider sees.
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self.model = model
        self._url = endpoint_url(base_url, "chat/completions")
        self._timeout = timeout
        self._max_retries = max_retries
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._headers = key_headers(api_key, key_header)
        self._api_key = api_key
        self._secrets = secrets_of(base_url)
        self._owns_client = http_client is None
        self._client = http_client or httpx.AsyncClient(timeout=timeout)

    async def complete(self, system: str, user: str) -> str:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        }
        if self._temperature is not None:
            payload["temperature"] = self._temperature
        if self._max_tokens is not None:
            payload["max_tokens"] = self._max_tokens
        attempt = 0
        while True:
            started = time.perf_counter()
            outcome, retry_after = await self._attempt(payload)
            LLM_SECONDS.observe(time.perf_counter() - started)
            LLM_CALLS.labels("ok" if isinstance(outcome, str) else outcome.code).inc()
            if isinstance(outcome, str):
                return outcome
            error = outcome
            error.provider_retry_after = retry_after
            if attempt >= self._max_retries or not _is_retryable(error):
                raise error
            if retry_after is not None and retry_after > self._backoff_max:
                # Waiting that long would hold a synchronous request, or a fold, far past
                # any sensible wait: the caller's fallback answers sooner.
                log.warning("LLM call failed (%s) and asked to wait %gs, more than the "
                            "%gs this client waits; not retried", error.code, retry_after,
                            self._backoff_max)
                raise error
            delay = self._delay(attempt, retry_after)
            log.warning(
                "LLM call failed (%s), retry %d/%d in %.2fs",
                error.code,
                attempt + 1,
                self._max_retries,
                delay,
            )
            await asyncio.sleep(delay)
            attempt += 1

    async def _attempt(self, payload: dict[str, Any]) -> tuple[str | LLMError, float | None]:
        """One HTTP call, once a slot is free (the wait is not the call's timeout): the
        answer text, or the error and the server's Retry-After."""
        async with self._in_flight:
            return await self._call(payload)

    async def _call(self, payload: dict[str, Any]) -> tuple[str | LLMError, float | None]:
        try:
            async with asyncio.timeout(self._timeout), self._client.stream(
                    "POST", self._url, json=payload,
                    headers={**self._headers, **outgoing()}) as response:
                body = await _read_bounded(response)
        except (TimeoutError, httpx.TimeoutException) as exc:
            return LLMError(
                f"the LLM did not answer within {self._timeout:g}s ({exc.__class__.__name__})",
                code="llm_timeout",
                status=504,
            ), None
        except httpx.TransportError as exc:
            return LLMError(
                f"the LLM could not be reached: {exc.__class__.__name__}: {exc}",
                code="llm_connection_error",
                status=503,
            ), None
        except httpx.HTTPError as exc:
            # The bytes came, but not as HTTP can read them (a Content-Encoding the body
            # is not in, say).
            return _bad(f"the LLM's answer could not be decoded: "
                        f"{exc.__class__.__name__}: {exc}"), None
        except _TooLarge:
            return _bad(f"the LLM's answer is larger than {MAX_ANSWER_BYTES} bytes"), None
        if response.status_code != 200:
            self._log_body(f"the LLM answered HTTP {response.status_code}", body)
            return LLMError(
                f"the LLM answered HTTP {response.status_code}",
                code="llm_http_error",
                status=502,
                http_status=response.status_code,
            ), retry_after_seconds(response)
        answer = _parse_completion(body)
        if isinstance(answer, LLMError):
            self._log_body(answer.detail, body)
        return answer, None

    def _log_body(self, what: str, body: bytes) -> None:
        """The operator's log gets the error code the provider gave an answer that is no
        completion, and its start at DEBUG (app/providers/answer_preview.py); the error,
        which reaches tenants (a session's events and health), does not: this client's
        key and endpoint are the operator's, shared by every tenant."""
        log_unexpected_answer(log, what, "the LLM's answer", body, limit=200,
                              api_key=self._api_key, secrets=self._secrets)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(self._backoff_max, retry_after)
        # Jitter spreads concurrent groups that were throttled together.
        base = min(self._backoff_max, self._backoff_base * 2.0**attempt)
        return base * random.uniform(0.5, 1.0)

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> ChatCompletionsClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _is_retryable(error: LLMError) -> bool:
    if error.code in ("llm_timeout", "llm_connection_error"):
        return True
    return error.code == "llm_http_error" and error.http_status in RETRYABLE_STATUS


async def _read_bounded(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_completion(raw: bytes) -> str | LLMError:
    """The first choice's text, or an error saying why the body is not a completion."""
    try:
        body: Any = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON (or not UTF-8), or nested too deep
        return _bad("the LLM answered a body that is not JSON")
    if not isinstance(body, dict):
        return _bad("the LLM answered JSON that is not an object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return _bad("the LLM answer has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return _bad("the LLM answer's first choice has no message")
    finish = choices[0].get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        return _bad("the LLM answer's finish_reason is not text")
    if finish is not None and finish.lower() in INCOMPLETE:
        # A summary cut off by the model's token limit, or blanked by a filter, read as
        # whole: a consolidation archived the memories it no longer held (an exploratory
        # probe). An error instead, so the op falls back and the fold is tried again.
        return LLMError(f"the LLM's answer is incomplete (finish_reason {finish!r})",
                        code="llm_incomplete", status=502)
    content = message.get("content")
    if content is None:
        return ""  # a refusal or tool call: no text, which callers treat as empty
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Some servers answer content parts: [{"type": "text", "text": "..."}], and a
        # reasoning model (Mistral's Magistral) its thinking as parts of another type.
        parts = [p for p in content if isinstance(p, dict)
                 and p.get("type", "text") == "text"]
        texts = [p.get("text") for p in parts]
        if all(isinstance(t, str) for t in texts):
            return "".join(t for t in texts if isinstance(t, str))
    return _bad("the LLM answer's message content is not text")


def _bad(detail: str) -> LLMError:
    return LLMError(detail, code="llm_bad_response", status=502)


def build_llm_client(settings: Settings) -> ChatCompletionsClient | None:
    """The configured LLM, or None when `ENGRAM_LLM_BASE_URL` is not set."""
    if settings.llm_base_url is None:
        return None
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return ChatCompletionsClient(
        base_url=settings.llm_base_url,
        model=settings.llm_model,
        api_key=key,
        key_header=settings.llm_api_key_header,
        timeout=settings.llm_timeout_seconds,
        max_retries=settings.llm_max_retries,
        max_in_flight=settings.llm_max_in_flight,
    )
