"""The chat-completions client and the llm_synthesis fallback against a real HTTP server
on 127.0.0.1 that answers, fails, throttles, hangs and talks garbage on cue."""

import asyncio
import io
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.consolidation.ops import LLMSynthesis
from app.consolidation.types import Entry, OpContext
from app.providers.llm import MAX_ANSWER_BYTES, ChatCompletionsClient, LLMError, build_llm_client
from app.service.log_format import configure
from app.settings import Settings
from tests.conftest import sample
from tests.fakes.llm_server import (
    Deterministic,
    Fail,
    FakeLLMServer,
    Garbage,
    Hang,
    NoChoices,
    RecordedRequest,
    Reply,
    fake_answer,
)

TIMEOUT = 0.5


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as running:
        yield running


@pytest.fixture
async def client(server: FakeLLMServer) -> AsyncIterator[ChatCompletionsClient]:
    async with ChatCompletionsClient(
        base_url=server.base_url + "/",
        model="fake-model",
        api_key="sk-test",
        timeout=TIMEOUT,
        max_retries=2,
        backoff_base=0.01,
    ) as llm:
        yield llm


async def sent_once(server: FakeLLMServer, **settings: Any) -> RecordedRequest:
    """The request a client built from the settings sends for one completion."""
    llm = build_llm_client(Settings(llm_base_url=server.base_url, **settings))
    assert llm is not None
    async with llm:
        await llm.complete("be brief", "- one")
    [request] = server.requests
    return request


async def test_a_key_header_named_in_settings_carries_the_key_as_is(
    server: FakeLLMServer,
) -> None:
    """Azure OpenAI's classic deployment endpoints take the key in `api-key`, with no
    scheme, and no Authorization header."""
    request = await sent_once(server, llm_api_key="sk-azure", llm_api_key_header="api-key")
    assert request.api_key == "sk-azure"
    assert request.authorization is None


async def test_the_default_key_header_of_the_settings_is_a_bearer_authorization(
    server: FakeLLMServer,
) -> None:
    request = await sent_once(server, llm_api_key="sk-test")
    assert request.authorization == "Bearer sk-test"
    assert request.api_key is None


async def test_answers_and_sends_an_openai_shaped_request(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    answer = await client.complete("be brief", "Header\n\n- one\n- two")

    assert answer == "Summary: one two" == fake_answer("be brief", "Header\n\n- one\n- two")
    [request] = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.authorization == "Bearer sk-test"
    assert request.body == {
        "model": "fake-model",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "Header\n\n- one\n- two"},
        ],
        "temperature": 0.0,
    }


async def test_an_empty_answer_is_returned_as_empty_text(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    server.script(Reply(""))

    assert await client.complete("s", "u") == ""


async def test_retries_a_429_then_succeeds(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    server.script(Fail(429, retry_after=0.05), Reply("ok"))

    started = time.monotonic()
    assert await client.complete("s", "u") == "ok"

    assert len(server.requests) == 2
    assert time.monotonic() - started >= 0.05  # Retry-After was honoured


async def test_retries_5xx_then_succeeds(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    server.script(Fail(503), Fail(500), Reply("ok"))

    assert await client.complete("s", "u") == "ok"
    assert len(server.requests) == 3


async def test_a_lasting_500_fails_after_bounded_retries(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    server.default = Fail(500)

    with pytest.raises(LLMError) as caught:
        await client.complete("s", "u")

    assert (caught.value.code, caught.value.http_status) == ("llm_http_error", 500)
    assert len(server.requests) == 3  # one try and two retries
    assert "sk-test" not in str(caught.value)


async def test_a_client_error_is_not_retried(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    server.script(Fail(401))

    with pytest.raises(LLMError) as caught:
        await client.complete("s", "u")

    assert (caught.value.code, caught.value.http_status) == ("llm_http_error", 401)
    assert len(server.requests) == 1


async def test_a_hanging_server_times_out(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    server.default = Hang(seconds=5)

    started = time.monotonic()
    with pytest.raises(LLMError) as caught:
        await client.complete("s", "u")

    assert caught.value.code == "llm_timeout"
    assert caught.value.status == 504
    assert len(server.requests) == 3
    assert time.monotonic() - started < 3 * TIMEOUT + 1


async def test_a_timeout_then_an_answer_succeeds(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    server.script(Hang(seconds=5))

    assert await client.complete("s", "u") == "Summary: u"


@pytest.mark.parametrize("behaviour", [
    Garbage(), Garbage('["a list"]'), NoChoices(),
    # What httpx cannot decode, and JSON too deep for the parser: these escaped as bare
    # exceptions (DecodingError, RecursionError), failing runs and folds.
    pytest.param(Garbage(b'{"choices": []}', (("Content-Encoding", "gzip"),)),
                 id="wrong-content-encoding"),
    pytest.param(Garbage("[" * 200_000 + "]" * 200_000), id="nested-too-deep"),
    pytest.param(Garbage(b'{"choices": "caf\xe9"}'), id="not-utf8"),
    pytest.param(Reply("x" * (MAX_ANSWER_BYTES + 1)), id="larger-than-the-bound"),
])
async def test_garbage_is_a_bad_response_and_is_not_retried(
    server: FakeLLMServer, client: ChatCompletionsClient, behaviour: Garbage | NoChoices
) -> None:
    server.script(behaviour)

    with pytest.raises(LLMError) as caught:
        await client.complete("s", "u")

    assert caught.value.code == "llm_bad_response"
    assert len(server.requests) == 1


@pytest.mark.parametrize("finish_reason", ["length", "content_filter", "MAX_TOKENS", "SAFETY",
                                           "max_tokens"])
async def test_an_answer_cut_off_or_filtered_is_incomplete_and_not_retried(
    server: FakeLLMServer, client: ChatCompletionsClient, finish_reason: str
) -> None:
    server.script(Reply("Summary: Alice prefers dark mode in every",
                        finish_reason=finish_reason))

    with pytest.raises(LLMError) as caught:
        await client.complete("s", "u")

    assert caught.value.code == "llm_incomplete"
    assert finish_reason in caught.value.detail
    assert len(server.requests) == 1  # the same prompt would be cut again


async def test_an_incomplete_answer_is_logged_without_what_it_says(
    server: FakeLLMServer, client: ChatCompletionsClient, caplog: pytest.LogCaptureFixture,
) -> None:
    """An observability probe: a cut-off completion, a summary of users' memories, went
    to the WARNING line ("the LLM answered the LLM's answer is incomplete: ...")."""
    server.script(Reply("Summary: the user's PIN is 1234 and", finish_reason="length"))

    with caplog.at_level(logging.WARNING, logger="engram.llm"), pytest.raises(LLMError):
        await client.complete("s", "u")

    [line] = [r.getMessage() for r in caplog.records if r.name == "engram.llm"]
    assert line == "the LLM's answer is incomplete (finish_reason 'length')"


@pytest.mark.parametrize("finish_reason", ["stop", "eos", None])
async def test_an_answer_ended_otherwise_is_the_answer(
    server: FakeLLMServer, client: ChatCompletionsClient, finish_reason: str | None
) -> None:
    choice = {"index": 0, "message": {"role": "assistant", "content": "Summary: u"},
              "finish_reason": finish_reason}
    server.script(Garbage(json.dumps({"choices": [choice]})))

    assert await client.complete("s", "u") == "Summary: u"


@pytest.mark.parametrize("finish_reason", [{"x": 1}, ["length"], 3])
async def test_a_finish_reason_that_is_not_text_is_a_bad_response(
    server: FakeLLMServer, client: ChatCompletionsClient, finish_reason: object
) -> None:
    """A re-probe: `finish in INCOMPLETE` raised TypeError (unhashable), which failed a
    whole consolidation run instead of falling back."""
    choice = {"index": 0, "message": {"role": "assistant", "content": "- x"},
              "finish_reason": finish_reason}
    server.script(Garbage(json.dumps({"choices": [choice]})))

    with pytest.raises(LLMError) as caught:
        await client.complete("s", "u")

    assert caught.value.code == "llm_bad_response"


async def test_a_reasoning_models_thinking_parts_are_left_out(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    """Mistral's Magistral answers its thinking as a content part of its own type; every
    answer was a bad response, and every synthesis fell back (an exploratory probe)."""
    content = [{"type": "thinking", "thinking": [{"type": "text", "text": "Hmm."}]},
               {"type": "text", "text": "Summary: "}, {"type": "text", "text": "u"}]
    choice = {"index": 0, "message": {"role": "assistant", "content": content},
              "finish_reason": "stop"}
    server.script(Garbage(json.dumps({"choices": [choice]})))

    assert await client.complete("s", "u") == "Summary: u"


async def test_a_query_in_the_base_url_is_kept(server: FakeLLMServer) -> None:
    """An exploratory probe: an Azure deployment's `?api-version=` went into the path
    (`/v1?api-version=.../chat/completions`), and every call answered 404."""
    async with ChatCompletionsClient(base_url=server.base_url + "?api-version=2024-10-21",
                                     model="fake-model", timeout=TIMEOUT) as llm:
        assert await llm.complete("be brief", "- one") == fake_answer("be brief", "- one")

    assert server.requests[0].path == "/v1/chat/completions?api-version=2024-10-21"


async def test_an_unreachable_server_is_a_connection_error() -> None:
    with FakeLLMServer() as gone:
        base_url = gone.base_url
    async with ChatCompletionsClient(
        base_url=base_url, model="m", timeout=TIMEOUT, max_retries=1, backoff_base=0.01
    ) as llm:
        with pytest.raises(LLMError) as caught:
            await llm.complete("s", "u")

    assert (caught.value.code, caught.value.status) == ("llm_connection_error", 503)


OUTCOMES = ("ok", "llm_timeout", "llm_connection_error", "llm_http_error", "llm_bad_response")


def calls() -> dict[str, float]:
    return {o: sample("engram_llm_calls_total", outcome=o) for o in OUTCOMES}


async def test_every_call_is_counted_by_outcome_in_the_metrics(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    before, timed = calls(), sample("engram_llm_call_seconds_count")
    server.script(Fail(500), Hang(seconds=5), Reply("ok"), Garbage())

    assert await client.complete("s", "u") == "ok"
    with pytest.raises(LLMError):
        await client.complete("s", "u")

    after = calls()
    assert {o: after[o] - before[o] for o in OUTCOMES} == {
        "ok": 1, "llm_timeout": 1, "llm_connection_error": 0, "llm_http_error": 1,
        "llm_bad_response": 1}
    assert sample("engram_llm_call_seconds_count") - timed == 4


async def test_a_retry_after_past_the_longest_wait_is_not_retried(
    server: FakeLLMServer,
) -> None:
    """The server asked for 60 s: the call fails at once (the caller falls back) rather
    than waiting the client's cap, 8 s, and asking again too soon."""
    server.script(Fail(429, retry_after=60))
    async with ChatCompletionsClient(base_url=server.base_url, model="m", timeout=TIMEOUT,
                                     max_retries=2, backoff_max=0.2) as llm:
        started = time.monotonic()
        with pytest.raises(LLMError) as caught:
            await llm.complete("s", "u")

    assert (caught.value.code, caught.value.http_status) == ("llm_http_error", 429)
    assert len(server.requests) == 1
    assert time.monotonic() - started < 0.2


async def test_calls_in_flight_are_bounded_for_the_whole_client(
    server: FakeLLMServer,
) -> None:
    server.default = Deterministic(delay=0.1)
    async with ChatCompletionsClient(base_url=server.base_url, model="m", timeout=2,
                                     max_in_flight=3) as llm:
        answers = await asyncio.gather(*(llm.complete("s", f"h\n\n{n}") for n in range(12)))

    assert answers == [f"Summary: {n}" for n in range(12)]
    assert server.max_in_flight == 3


async def test_concurrent_calls_overlap(server: FakeLLMServer) -> None:
    server.default = Deterministic(delay=0.2)
    async with ChatCompletionsClient(base_url=server.base_url, model="m", timeout=2) as llm:
        started = time.monotonic()
        answers = await asyncio.gather(*(llm.complete("s", f"h\n\n{n}") for n in range(8)))

    assert answers == [f"Summary: {n}" for n in range(8)]
    assert time.monotonic() - started < 1.0  # one after another would take 1.6 s


# llm_synthesis over the real client ------------------------------------------------------

T0 = datetime(2024, 1, 1, tzinfo=UTC)
GROUP = [
    Entry(uuid.UUID(int=n), text, "trips", 0.5, T0 + timedelta(minutes=n))
    for n, text in [(1, "Alice flies to Lisbon on 12 June."), (2, "The flight is TP 1234.")]
]
CONCATENATED = "- Alice flies to Lisbon on 12 June.\n- The flight is TP 1234."


async def test_llm_synthesis_golden_over_http(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    result = await LLMSynthesis().consolidate(GROUP, "trips", OpContext(llm=client))

    assert result.summary == "Summary: Alice flies to Lisbon on 12 June. The flight is TP 1234."
    assert result.represented_ids == (uuid.UUID(int=1), uuid.UUID(int=2))
    assert (result.mode, result.detail) == ("llm_synthesis", None)


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        (Fail(500), "llm_http_error"),
        (Hang(seconds=5), "llm_timeout"),
        (Reply(""), "llm_empty_answer"),
        (Reply("  \n "), "llm_empty_answer"),
        (Garbage(), "llm_bad_response"),
        (NoChoices(), "llm_bad_response"),
        # Cut off by the model's token limit, it was stored as the summary and the
        # memories it no longer held were archived (an exploratory probe).
        (Reply("Summary: Alice prefers dark mode in every", finish_reason="length"),
         "llm_incomplete"),
    ],
)
async def test_llm_synthesis_falls_back_to_concatenate_over_http(
    server: FakeLLMServer,
    client: ChatCompletionsClient,
    behaviour: Fail | Hang | Reply | Garbage | NoChoices,
    reason: str,
) -> None:
    server.default = behaviour

    result = await LLMSynthesis().consolidate(GROUP, "trips", OpContext(llm=client))

    assert result.summary == CONCATENATED
    assert result.represented_ids == (uuid.UUID(int=1), uuid.UUID(int=2))
    assert (result.mode, result.detail) == ("fallback:concatenate", reason)


async def test_llm_synthesis_succeeds_after_a_throttled_first_try(
    server: FakeLLMServer, client: ChatCompletionsClient
) -> None:
    server.script(Fail(429), Reply("Alice: Lisbon, 12 June, TP 1234."))

    result = await LLMSynthesis().consolidate(GROUP, "trips", OpContext(llm=client))

    assert (result.summary, result.mode) == ("Alice: Lisbon, 12 June, TP 1234.", "llm_synthesis")


async def test_credentials_in_the_llms_url_stay_out_of_the_log(server: FakeLLMServer) -> None:
    """Found by an operator probe: httpx logs each request's URL at INFO, and a gateway's
    user:password in ENGRAM_LLM_BASE_URL went into every line."""
    root = logging.getLogger()
    saved = [(h, h.formatter, list(h.filters)) for h in root.handlers]
    level = root.level
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    root.addHandler(handler)
    try:
        configure("info", "text")  # as `serve` does
        root.setLevel(logging.INFO)  # basicConfig leaves pytest's root level be
        secret_url = server.base_url.replace("http://", "http://svc:PASSWORDX@") + "/"
        async with ChatCompletionsClient(base_url=secret_url, model="fake-model",
                                         api_key="sk-test", timeout=TIMEOUT) as llm:
            assert await llm.complete("be brief", "- one") == fake_answer("be brief", "- one")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for h, formatter, filters in saved:
            h.setFormatter(formatter)
            h.filters[:] = filters
    logged = lines.getvalue()
    assert "HTTP Request: POST http://<redacted>@127.0.0.1" in logged
    assert "PASSWORDX" not in logged
    assert server.requests[0].path == "/v1/chat/completions"
