"""The LLM client: the `LLMClient` protocol ops depend on, and an httpx client for any
OpenAI-compatible `/chat/completions` endpoint.

Timeouts, connection errors, 429 and 5xx answers are retried a bounded number of times
with exponential backoff; what still fails, and any answer that is not a well-formed
completion, becomes an `LLMError` with a stable code, never a bare exception.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Protocol

import httpx

from app.errors import ProviderError
from app.service.metrics import LLM_CALLS, LLM_SECONDS
from app.service.request_id import outgoing
from app.settings import Settings

log = logging.getLogger("engram.llm")

RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class LLMClient(Protocol):
    """What ops need from a language model: one system + user prompt in, text out.

    An empty string is a valid answer here; callers decide what an empty answer means.
    """

    async def complete(self, system: str, user: str) -> str: ...


class LLMError(ProviderError):
    """The LLM failed, timed out or answered something that is not a completion.

    `code` is stable: llm_timeout, llm_connection_error, llm_http_error,
    llm_bad_response (and llm_not_configured, raised by callers with no client).
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
        timeout: float = 30.0,
        max_retries: int = 2,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        temperature: float | None = 0.0,
        max_tokens: int | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self.model = model
        self._url = base_url.rstrip("/") + "/chat/completions"
        self._timeout = timeout
        self._max_retries = max_retries
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
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
            if attempt >= self._max_retries or not _is_retryable(error):
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
        """One HTTP call: the answer text, or the error and the server's Retry-After."""
        try:
            async with asyncio.timeout(self._timeout):
                response = await self._client.post(self._url, json=payload,
                                                   headers={**self._headers, **outgoing()})
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
        if response.status_code != 200:
            return LLMError(
                f"the LLM answered HTTP {response.status_code}: {response.text[:200]}",
                code="llm_http_error",
                status=502,
                http_status=response.status_code,
            ), _retry_after(response)
        return _parse_completion(response), None

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


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date; the exponential backoff is good enough
    return seconds if seconds >= 0 else None


def _parse_completion(response: httpx.Response) -> str | LLMError:
    """The first choice's text, or an error saying why the body is not a completion."""
    try:
        body: Any = response.json()
    except ValueError:
        return _bad(f"the LLM answered a body that is not JSON: {response.text[:200]!r}")
    if not isinstance(body, dict):
        return _bad("the LLM answered JSON that is not an object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return _bad(f"the LLM answer has no choices: {response.text[:200]!r}")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return _bad("the LLM answer's first choice has no message")
    content = message.get("content")
    if content is None:
        return ""  # a refusal or tool call: no text, which callers treat as empty
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Some servers answer content parts: [{"type": "text", "text": "..."}].
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        if all(isinstance(p, str) for p in parts):
            return "".join(p for p in parts if isinstance(p, str))
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
        timeout=settings.llm_timeout_seconds,
        max_retries=settings.llm_max_retries,
    )
