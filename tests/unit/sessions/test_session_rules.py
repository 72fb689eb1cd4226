"""The pure session rules: the summariser-health state machine, fold arithmetic, the
context strategies and fold warning, and the extractive and LLM summarisers.

No database, no HTTP: every value is built in the test and every answer is exact.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from app.providers.llm import LLMError
from app.sessions.context import (
    STRATEGIES,
    NoContext,
    RollingSummary,
    Truncation,
    estimate_tokens,
    fold_warning,
    newest_lines_within,
    newest_within,
    strategy_in_force,
    within_tokens,
)
from app.sessions.folder import LONGEST_ASKED_WAIT, _later_of
from app.sessions.folding import (
    Chunk,
    FoldPolicy,
    backlog,
    fold_is_near,
    next_fold,
    overflow,
    turns_until_fold,
)
from app.sessions.health import (
    Health,
    HealthPolicy,
    SessionHealthState,
    after_failure,
    after_success,
    next_try,
)
from app.sessions.summariser import (
    SYSTEM,
    ExtractiveSummariser,
    LLMSummariser,
    SummaryFailed,
    fold_prompt,
)
from app.sessions.types import SessionState, SessionStrategy, TurnView

T0 = datetime(2024, 1, 1, tzinfo=UTC)
FOLD = FoldPolicy(threshold=6, recent=2, backlog_max=2)


def turn(seq: int, content: str = "", *, role: str = "user", tokens: int = 1) -> TurnView:
    return TurnView(
        seq=seq, role=role, content=content, tokens=tokens, created_at=T0 + timedelta(seconds=seq)
    )


def session(
    strategy: SessionStrategy = "rolling_summary",
    *,
    turns: int = 0,
    cursor: int = 0,
    summary: str | None = None,
    health: Health | None = None,
) -> SessionState:
    return SessionState(
        session_id="s1",
        user_id="u1",
        agent_id=None,
        strategy=strategy,
        turns=turns,
        cursor=cursor,
        dropped=0,
        summary=summary,
        summary_updated_at=None,
        health=health or Health(),
        last_error=None,
        health_changed_at=None,
        created_at=T0,
        updated_at=T0,
    )


# --- health -------------------------------------------------------------------------

POLICY = HealthPolicy(degrade_after=3, recover_after=2)


@pytest.mark.parametrize(
    ("before", "event", "policy", "after"),
    [
        pytest.param(Health(), "success", POLICY, Health(), id="healthy+success"),
        pytest.param(
            Health(), "failure", POLICY, Health("retry", failures=1), id="healthy+failure->retry"
        ),
        pytest.param(
            Health("retry", failures=1),
            "failure",
            POLICY,
            Health("retry", failures=2),
            id="retry+failure-below-degrade_after",
        ),
        pytest.param(
            Health("retry", failures=2),
            "failure",
            POLICY,
            Health("degraded", failures=3),
            id="retry+failure->degraded",
        ),
        pytest.param(
            Health("retry", failures=2), "success", POLICY, Health(), id="retry+success->healthy"
        ),
        pytest.param(
            Health("degraded", failures=3),
            "failure",
            POLICY,
            Health("degraded", failures=4),
            id="degraded+failure",
        ),
        pytest.param(
            Health("degraded", failures=4),
            "success",
            POLICY,
            Health("recovering", failures=0, successes=1),
            id="degraded+success->recovering",
        ),
        pytest.param(
            Health("recovering", successes=1),
            "success",
            POLICY,
            Health(),
            id="recovering+success->healthy",
        ),
        pytest.param(
            Health("recovering", successes=1),
            "failure",
            POLICY,
            Health("degraded", failures=1, successes=0),
            id="recovering+failure->degraded",
        ),
        pytest.param(
            Health(),
            "failure",
            HealthPolicy(degrade_after=1),
            Health("degraded", failures=1),
            id="degrade_after=1",
        ),
        pytest.param(
            Health("degraded", failures=5),
            "success",
            HealthPolicy(recover_after=1),
            Health(),
            id="recover_after=1",
        ),
    ],
)
def test_health_transitions(
    before: Health, event: str, policy: HealthPolicy, after: Health
) -> None:
    step = after_success if event == "success" else after_failure
    assert step(before, policy) == after


def test_health_walks_a_whole_cycle() -> None:
    h = Health()
    states: list[tuple[SessionHealthState, int, int]] = []
    for event in ("failure", "failure", "failure", "success", "success"):
        h = after_success(h, POLICY) if event == "success" else after_failure(h, POLICY)
        states.append((h.state, h.failures, h.successes))
    assert states == [
        ("retry", 1, 0),
        ("retry", 2, 0),
        ("degraded", 3, 0),
        ("recovering", 0, 1),
        ("healthy", 0, 0),
    ]


@pytest.mark.parametrize(
    ("state", "summarising"),
    [("healthy", True), ("retry", True), ("degraded", False), ("recovering", True)],
)
def test_summarising_is_false_only_when_degraded(state: SessionHealthState,
                                                  summarising: bool) -> None:
    assert Health(state).summarising is summarising


def test_next_try_doubles_in_retry_and_caps_at_probe_interval() -> None:
    policy = HealthPolicy(
        degrade_after=10, retry_delay=timedelta(seconds=2), probe_interval=timedelta(seconds=30)
    )
    delays = [next_try(Health("retry", failures=n), policy).total_seconds() for n in range(1, 8)]
    assert delays == [2, 4, 8, 16, 30, 30, 30]


def test_next_try_follows_the_failures_reached_by_after_failure() -> None:
    h = Health()
    delays = []
    for _ in range(4):
        h = after_failure(h, POLICY)
        delays.append(next_try(h, POLICY).total_seconds())
    assert delays == [2, 4, 30, 30]  # retry, retry, then degraded: probe_interval


def test_next_try_caps_without_overflow_after_many_failures_in_retry() -> None:
    # degrade_after may be 100: 2 s x 2**46 was past timedelta's range (OverflowError).
    policy = HealthPolicy(
        degrade_after=100, retry_delay=timedelta(hours=1), probe_interval=timedelta(hours=2)
    )
    assert [next_try(Health("retry", failures=n), policy) for n in (1, 2, 47, 99)] == [
        timedelta(hours=1), timedelta(hours=2), timedelta(hours=2), timedelta(hours=2)]


@pytest.mark.parametrize(("asked", "waited"), [
    (None, timedelta(seconds=2)),
    (0.5, timedelta(seconds=2)),
    (600.0, timedelta(seconds=600)),
    (7200.0, LONGEST_ASKED_WAIT),
    # Past timedelta's range: an OverflowError had failed the fold job.
    (1e14, LONGEST_ASKED_WAIT),
    (1e300, LONGEST_ASKED_WAIT),
])
def test_a_providers_wait_holds_the_fold_back_at_most_an_hour(
    asked: float | None, waited: timedelta
) -> None:
    assert _later_of(timedelta(seconds=2), asked) == waited


def test_next_try_is_probe_interval_while_degraded() -> None:
    policy = HealthPolicy(retry_delay=timedelta(seconds=1), probe_interval=timedelta(seconds=45))
    assert next_try(Health("degraded", failures=1), policy) == timedelta(seconds=45)
    assert next_try(Health("degraded", failures=99), policy) == timedelta(seconds=45)


# --- folding ------------------------------------------------------------------------


def test_fold_policy_size() -> None:
    assert FOLD.size == 4
    assert Chunk(5, 8).turns == 4


@pytest.mark.parametrize("turns", [0, 1, 5])
def test_no_fold_below_threshold(turns: int) -> None:
    assert backlog(turns, 0, FOLD) == 0
    assert next_fold(turns, 0, FOLD) is None
    assert overflow(turns, 0, FOLD) == []


def test_fold_at_threshold_takes_the_oldest_turns_past_the_cursor() -> None:
    assert backlog(6, 0, FOLD) == 1
    assert next_fold(6, 0, FOLD) == Chunk(1, 4)
    assert next_fold(13, 7, FOLD) == Chunk(8, 11)  # 6 unsummarised past cursor 7
    assert next_fold(12, 7, FOLD) is None  # only 5


@pytest.mark.parametrize(
    ("turns", "cursor", "expected"),
    [(6, 0, 1), (9, 0, 1), (10, 0, 2), (13, 0, 2), (14, 0, 3), (14, 4, 2), (22, 0, 5)],
)
def test_backlog_counts_due_folds(turns: int, cursor: int, expected: int) -> None:
    assert backlog(turns, cursor, FOLD) == expected


def test_overflow_drops_the_oldest_chunks_beyond_backlog_max() -> None:
    assert overflow(10, 0, FOLD) == []  # backlog 2 == backlog_max
    assert overflow(14, 0, FOLD) == [Chunk(1, 4)]
    chunks = overflow(22, 0, FOLD)
    assert chunks == [Chunk(1, 4), Chunk(5, 8), Chunk(9, 12)]
    assert overflow(25, 3, FOLD) == [Chunk(4, 7), Chunk(8, 11), Chunk(12, 15)]


def test_after_overflow_the_backlog_equals_backlog_max() -> None:
    for turns in range(0, 60):
        for cursor in range(0, turns + 1):
            chunks = overflow(turns, cursor, FOLD)
            before = backlog(turns, cursor, FOLD)
            if not chunks:
                assert before <= FOLD.backlog_max
                continue
            # contiguous, oldest first, starting right after the cursor
            assert chunks[0].first == cursor + 1
            for a, b in pairwise(chunks):
                assert b.first == a.last + 1
            assert all(c.turns == FOLD.size for c in chunks)
            assert backlog(turns, chunks[-1].last, FOLD) == FOLD.backlog_max


@pytest.mark.parametrize(
    ("turns", "until", "near"),
    [(0, 6, False), (3, 3, False), (4, 2, True), (5, 1, True), (6, 0, True), (9, 0, True)],
)
def test_turns_until_fold_and_fold_is_near(turns: int, until: int, near: bool) -> None:
    assert turns_until_fold(turns, 0, FOLD) == until
    assert fold_is_near(turns, 0, FOLD) is near
    # the same counts past a cursor
    assert turns_until_fold(turns + 10, 10, FOLD) == until
    assert fold_is_near(turns + 10, 10, FOLD) is near


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 6, "recent": 6}, "recent"),
        ({"threshold": 6, "recent": 7}, "recent"),
        ({"threshold": 6, "recent": -1}, "recent"),
        ({"threshold": 6, "recent": 2, "backlog_max": 0}, "backlog_max"),
    ],
)
def test_fold_policy_refuses_bad_values(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FoldPolicy(**kwargs)


def test_fold_properties_over_many_turn_counts() -> None:
    for policy in (
        FOLD,
        FoldPolicy(threshold=5, recent=0, backlog_max=1),
        FoldPolicy(threshold=20, recent=10, backlog_max=10),
    ):
        for turns in range(0, 80):
            for cursor in range(0, turns + 1):
                due = backlog(turns, cursor, policy)
                assert (due == 0) is (turns - cursor < policy.threshold)
                fold = next_fold(turns, cursor, policy)
                assert (fold is None) is (due == 0)
                if fold is not None:
                    assert fold == Chunk(cursor + 1, cursor + policy.size)
                    assert fold.last <= turns - policy.recent
                assert len(overflow(turns, cursor, policy)) == max(0, due - policy.backlog_max)


# --- context ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 1), ("a", 1), ("abcd", 1), ("abcde", 2), ("abcdefgh", 2), ("x" * 401, 101),
     # Any other character is a token: 40 emoji were "10 tokens", a tokenizer's ~100.
     ("\U0001f600" * 40, 40), ("你好\uff0c世界", 5), ("Grüße", 3), ("see 東京 at 9", 5)],
)
def test_estimate_tokens(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_newest_within_keeps_the_newest_that_fit_oldest_first() -> None:
    turns = [turn(1, tokens=1), turn(2, tokens=5), turn(3, tokens=2), turn(4, tokens=3)]
    assert [t.seq for t in newest_within(turns, 5)] == [3, 4]
    assert [t.seq for t in newest_within(turns, 11)] == [1, 2, 3, 4]
    assert newest_within(turns, 2) == ()
    assert newest_within([], 100) == ()


def test_newest_within_stops_at_the_first_turn_that_does_not_fit() -> None:
    turns = [turn(1, tokens=1), turn(2, tokens=9), turn(3, tokens=2)]
    # turn 1 would fit the 3 left after turn 3, but turn 2 does not: no hole
    assert [t.seq for t in newest_within(turns, 5)] == [3]


def test_no_context_is_empty() -> None:
    s = session("none", turns=5)
    parts = NoContext().build(s, [turn(i) for i in range(1, 6)], 100)
    assert NoContext().reads_after(s) is None
    assert (parts.mode, parts.summary, parts.turns, parts.omitted, parts.tokens) == (
        "none",
        None,
        (),
        0,
        0,
    )


def test_truncation_omits_every_session_turn_not_kept() -> None:
    s = session("truncation", turns=10, cursor=4, summary="ignored")
    shown = [turn(i, tokens=3) for i in range(6, 11)]  # the caller capped to the newest 5
    parts = Truncation().build(s, shown, 10)
    assert Truncation().reads_after(s) == 0
    assert parts.mode == "truncation"
    assert parts.summary is None
    assert [t.seq for t in parts.turns] == [8, 9, 10]
    assert parts.omitted == 7  # 10 session turns - 3 kept
    assert parts.tokens == 9


def test_rolling_summary_puts_the_summary_first_and_fills_the_rest() -> None:
    summary = "x" * 20  # 5 tokens
    s = session(turns=12, cursor=8, summary=summary)
    past_cursor = [turn(i, tokens=2) for i in range(9, 13)]
    parts = RollingSummary().build(s, past_cursor, 10)
    assert RollingSummary().reads_after(s) == 8
    assert parts.mode == "rolling_summary"
    assert parts.summary == summary
    assert [t.seq for t in parts.turns] == [11, 12]  # 5 tokens left: two turns of 2
    assert parts.omitted == 2  # 4 turns past the cursor, 2 shown
    assert parts.tokens == 9


def test_rolling_summary_without_summary_uses_the_whole_budget() -> None:
    s = session(turns=3, cursor=0, summary=None)
    parts = RollingSummary().build(s, [turn(i, tokens=2) for i in range(1, 4)], 6)
    assert parts.summary is None
    assert [t.seq for t in parts.turns] == [1, 2, 3]
    assert (parts.omitted, parts.tokens) == (0, 6)


def test_rolling_summary_larger_than_the_budget_shows_no_turn() -> None:
    s = session(turns=10, cursor=8, summary="y" * 40)  # 10 tokens
    parts = RollingSummary().build(s, [turn(9), turn(10)], 4)
    assert parts.turns == ()
    assert parts.omitted == 2
    assert parts.tokens == 10  # the summary is never cut


def test_strategies_are_keyed_by_name() -> None:
    assert set(STRATEGIES) == {"none", "truncation", "rolling_summary"}
    assert all(name == strategy.name for name, strategy in STRATEGIES.items())


@pytest.mark.parametrize(
    ("strategy", "state", "in_force"),
    [
        ("rolling_summary", "healthy", "rolling_summary"),
        ("rolling_summary", "retry", "rolling_summary"),
        ("rolling_summary", "recovering", "rolling_summary"),
        ("rolling_summary", "degraded", "truncation"),
        ("truncation", "degraded", "truncation"),
        ("none", "degraded", "none"),
        ("none", "healthy", "none"),
    ],
)
def test_strategy_in_force(
    strategy: SessionStrategy, state: SessionHealthState, in_force: SessionStrategy
) -> None:
    s = session(strategy, health=Health(state))
    assert strategy_in_force(s).name == in_force


@pytest.mark.parametrize("strategy", ["truncation", "none"])
def test_no_fold_warning_without_rolling_summary(strategy: SessionStrategy) -> None:
    assert fold_warning(session(strategy, turns=6), FOLD) is None


@pytest.mark.parametrize(
    ("turns", "cursor", "when"),
    [
        (0, 0, None),
        (3, 0, None),
        (13, 10, None),
        (4, 0, "in 2 turns"),
        (5, 0, "in 1 turn"),
        (6, 0, "now"),
        (9, 0, "now"),
        (15, 10, "in 1 turn"),
    ],
)
def test_fold_warning(turns: int, cursor: int, when: str | None) -> None:
    warning = fold_warning(session(turns=turns, cursor=cursor), FOLD)
    if when is None:
        assert warning is None
        return
    assert warning == (
        f"The oldest turns of this session will be summarised {when}; store anything "
        "critical from them as a memory (POST /v1/memories) first."
    )
    assert "POST /v1/memories" in warning


# --- summarisers --------------------------------------------------------------------


async def test_extractive_keeps_fact_bearing_sentences_as_bullets() -> None:
    turns = [
        turn(1, "hello there. Alice lives in Paris. thanks a lot.", role="user"),
        turn(2, "ok sure. The meeting is at 10:30.", role="assistant"),
        turn(3, "sounds good. we meet tomorrow.", role="user"),
    ]
    out = await ExtractiveSummariser().fold(None, turns, 1000)
    assert out == (
        "- user: Alice lives in Paris.\n"
        "- assistant: The meeting is at 10:30.\n"
        "- user: we meet tomorrow."
    )


async def test_extractive_appends_after_the_previous_summary() -> None:
    previous = "- user: Bob owns 3 cats.\n- assistant: Noted for 2024."
    out = await ExtractiveSummariser().fold(
        previous, [turn(4, "The vet is Dr Smith.", role="user")], 1000
    )
    assert out == previous + "\n- user: The vet is Dr Smith."


async def test_extractive_keeps_the_first_sentence_of_a_turn_without_facts() -> None:
    out = await ExtractiveSummariser().fold(
        None, [turn(1, "That sounds good. We can talk later.", role="assistant")], 1000
    )
    assert out == "- assistant: That sounds good."


async def test_extractive_keeps_every_sentence_of_a_japanese_turn_as_written() -> None:
    """A re-probe: "私はPythonが好きです。" was one token with Latin capitals in it, no
    fact by case, and the fold kept only the turn's other sentence."""
    out = await ExtractiveSummariser().fold(
        None, [turn(1, "私はPythonが好きです。よろしくお願いします。")], 1000)

    assert out == "- user: 私はPythonが好きです。よろしくお願いします。"


async def test_extractive_does_not_repeat_a_sentence_within_one_fold() -> None:
    # Told again, it is kept once, at its newest telling; a line left with nothing goes.
    turns = [
        turn(1, "Alice is 30.", role="user"),
        turn(2, "alice  is 30. Bob is 40.", role="assistant"),
        turn(3, "Carol is 50.", role="user"),
    ]
    out = await ExtractiveSummariser().fold(None, turns, 1000)
    assert out == "- assistant: alice  is 30. Bob is 40.\n- user: Carol is 50."


async def test_extractive_does_not_repeat_a_later_sentence_of_the_summary() -> None:
    previous = "- user: Alice lives in Paris. She was born in 1990."
    out = await ExtractiveSummariser().fold(
        previous, [turn(2, "She was born in 1990. Bob is 40.")], 1000
    )
    assert out == "- user: Alice lives in Paris.\n- user: She was born in 1990. Bob is 40."


async def test_extractive_does_not_repeat_the_first_sentence_of_a_summary_line() -> None:
    # The summary's own bullets, folded again: "Alice lives in Paris." is already there
    # (as the first sentence of its bullet) and must not be there twice.
    summariser = ExtractiveSummariser()
    first = await summariser.fold(None, [turn(1, "Alice lives in Paris.")], 1000)
    assert first == "- user: Alice lives in Paris."
    second = await summariser.fold(first, [turn(2, "Alice lives in Paris. Bob is 40.")], 1000)
    assert second == "- user: Alice lives in Paris. Bob is 40."


async def test_extractive_keeps_a_restated_fact_past_the_lines_told_after_it() -> None:
    """Found by an exploratory probe: a sentence told again was skipped as already in the
    summary, and the old line holding it was then evicted, so a flight restated at turn
    25 was gone from a summary that still held turns 8-24."""
    flight = "Alice's flight is LH1234 on 3 May."
    items = {n: turn(n, f"Item {n}: Bob listed supplier {n} for the Lisbon offsite in "
                     f"May at {n}0 euros.") for n in range(2, 16)}
    summariser = ExtractiveSummariser()
    summary = await summariser.fold(None, [turn(1, flight), *(items[n] for n in range(2, 9))],
                                    1000)
    assert summary.startswith(f"- user: {flight}\n")
    # Turn 9 tells the flight again; the summary is full by turn 15.
    summary = await summariser.fold(
        summary, [turn(9, flight), *(items[n] for n in range(10, 16))], 1000)
    lines = summary.split("\n")

    assert len(summary) <= 1000
    assert lines[0].startswith("- user: Item ")  # old lines left for room
    assert f"- user: {flight}" in lines
    assert summary.count("LH1234") == 1
    assert lines.index(f"- user: {flight}") == lines.index(f"- user: {items[10].content}") - 1


async def test_extractive_leaves_a_line_untouched_unless_a_sentence_of_it_is_told_again(
) -> None:
    previous = "- user: Alice lives in Paris.  She is 30.\n- assistant: Noted (2024)"
    out = await ExtractiveSummariser().fold(previous, [turn(3, "she is 30.")], 1000)
    assert out == "- user: Alice lives in Paris.\n- assistant: Noted (2024)\n- user: she is 30."


async def test_extractive_keeps_a_line_whole_across_folds_whatever_its_separators() -> None:
    text = "Alice line one\u2028Bob line two\x85Carol three\x0bDan four\x0cEve 5."
    summariser = ExtractiveSummariser()
    first = await summariser.fold(None, [turn(1, text)], 1000)
    second = await summariser.fold(first, [turn(2, "Frank is 40.", role="assistant")], 1000)
    assert second.split("\n") == [f"- user: {text}", "- assistant: Frank is 40."]


async def test_extractive_gives_one_long_turn_a_quarter_and_keeps_what_came_before() -> None:
    """A re-probe: a 6,000-character turn was clipped to the whole allowance, and the
    summary lost every fact told before it."""
    summariser = ExtractiveSummariser()
    priya = turn(1, "My name is Priya and I live in Oslo since 2019.")
    first = await summariser.fold(None, [priya, turn(2, "会议记录" * 1500)], 1000)
    second = await summariser.fold(first, [turn(3, "Zoe\u0308 " * 1750, role="assistant")],
                                   1000)
    lines = second.split("\n")
    assert lines[0] == "- user: My name is Priya and I live in Oslo since 2019."
    assert len(lines) == 3
    assert all(len(line) <= 250 for line in lines[1:])  # a quarter of the characters
    assert all(50 < estimate_tokens(line) <= 63 for line in lines[1:])  # and the tokens
    assert lines[2].startswith("- assistant: Zo")


async def test_extractive_gives_one_chinese_turn_a_quarter_of_the_tokens() -> None:
    """A turn's line is held to a quarter of the summary's tokens too: asked for the
    whole ENGRAM_SESSION_SUMMARY_MAX_CHARS (the fold no longer asks for fewer characters
    in Chinese), a quarter of its characters was the whole of its tokens."""
    summariser = ExtractiveSummariser()
    priya = turn(1, "My name is Priya and I live in Oslo since 2019.")
    out = await summariser.fold(None, [priya, turn(2, "会议记录" * 1500)], 4000)
    lines = out.split("\n")
    assert lines[0] == "- user: My name is Priya and I live in Oslo since 2019."
    assert 240 < estimate_tokens(lines[1]) <= 250


async def test_extractive_keeps_the_newest_lines_within_the_tokens_on_mixed_scripts(
) -> None:
    """The fold hands it the whole ENGRAM_SESSION_SUMMARY_MAX_CHARS (it had been handed
    the characters an average of the session's text makes, and on mixed scripts dropped
    old lines the tokens had room for): it holds the tokens itself, by the oldest lines."""
    english = [turn(n, f"Fact {n}: Dana booked room {n} at the Alfama hotel for 12 March.")
               for n in range(1, 41)]
    summary = await ExtractiveSummariser().fold(None, english, 4000)
    assert len(summary.split("\n")) == 40  # about 2,900 characters, 730 tokens
    chinese = [turn(n, f"第{n}次会议" + "预算四千二百欧元周三出发" * 5) for n in range(41, 46)]
    out = await ExtractiveSummariser().fold(summary, chinese, 4000)

    assert len(out) < 4000
    assert 950 < estimate_tokens(out) <= 1000
    lines = out.split("\n")
    assert lines[-5:] == [f"- user: {t.content}" for t in chinese]
    assert summary.endswith("\n".join(lines[:-5]))  # the oldest English lines left


async def test_extractive_drops_the_oldest_lines_when_full() -> None:
    turns = [turn(i, f"Order {i} costs {i}0 euros.") for i in range(1, 6)]
    line = "- user: Order 1 costs 10 euros."  # every line is this long
    full = await ExtractiveSummariser().fold(None, turns, 1000)
    assert full.splitlines()[0] == line
    assert len(full) == 5 * len(line) + 4

    max_chars = 3 * len(line) + 2  # exactly three lines
    out = await ExtractiveSummariser().fold(None, turns, max_chars)
    assert out.splitlines() == [f"- user: Order {i} costs {i}0 euros." for i in (3, 4, 5)]
    assert len(out) == max_chars

    out = await ExtractiveSummariser().fold(None, turns, max_chars - 1)
    assert out.splitlines() == [f"- user: Order {i} costs {i}0 euros." for i in (4, 5)]
    assert len(out) <= max_chars - 1


async def test_extractive_drops_previous_summary_lines_before_new_ones() -> None:
    previous = "- user: Carol is 50.\n- user: Dave is 60."
    out = await ExtractiveSummariser().fold(previous, [turn(3, "Erin is 70.")], 40)
    assert out == "- user: Dave is 60.\n- user: Erin is 70."
    assert len(out) <= 40


async def test_extractive_result_never_exceeds_max_chars() -> None:
    turns = [
        turn(i, f"Item {i} weighs {i * 7} kg. Ship it to Berlin on May {i}.") for i in range(1, 12)
    ]
    for max_chars in (10, 25, 50, 80, 200, 500):
        out = await ExtractiveSummariser().fold("- user: Zed is 1.", turns, max_chars)
        assert len(out) <= max_chars
        assert out  # the newest line, clipped if need be, always fits


class FakeLLM:
    """Answers `answer`, or raises `error`; records every prompt it was given."""

    def __init__(self, answer: str = "", error: BaseException | None = None) -> None:
        self.answer = answer
        self.error = error
        self.calls: list[tuple[str, str]] = []

    async def complete(self, system: str, user: str) -> str:
        self.calls.append((system, user))
        if self.error is not None:
            raise self.error
        return self.answer


async def test_llm_summariser_sends_the_summary_and_the_turns() -> None:
    llm = FakeLLM("  Alice lives in Paris; Bob is 40.  ")
    turns = [
        turn(3, "Alice lives\n in   Paris.", role="user"),
        turn(4, "Bob is 40.", role="assistant"),
    ]
    out = await LLMSummariser(llm).fold("Earlier: Carol is 50.", turns, 500)
    assert out == "Alice lives in Paris; Bob is 40."
    assert len(llm.calls) == 1
    system, user = llm.calls[0]
    assert system == SYSTEM
    assert user == fold_prompt("Earlier: Carol is 50.", turns, 500)
    assert user == (  # as many characters of this English as make 125 tokens
        "Summary so far (at most 491 characters wanted):\n"
        "Earlier: Carol is 50.\n\nNew turns, oldest first:\n\n"
        "user: Alice lives in Paris.\nassistant: Bob is 40."
    )


async def test_llm_summariser_prompt_without_previous_summary() -> None:
    llm = FakeLLM("Dana is 20.")
    await LLMSummariser(llm).fold(None, [turn(1, "Dana is 20.")], 100)
    assert "(none yet)" in llm.calls[0][1]


def test_the_prompt_asks_for_the_characters_of_the_sessions_own_text() -> None:
    """As many as make the summary's tokens: in English the whole allowance, in Chinese (a
    token a character) about a quarter."""
    english = fold_prompt(None, [turn(1, "Dana booked the 9:40 train to Porto.")], 4000)
    assert "(at most 4000 characters wanted)" in english
    chinese = fold_prompt(None, [turn(1, "第3次会议 预算四千二百欧元 周三出发")], 4000)
    assert "(at most 1117 characters wanted)" in chinese


FACT_LINES = [f"- Fact {n:02d}: Dana booked room {n} at the Alfama hotel for 12 March."
              for n in range(50)]
SHANGHAI = "- 新\uff1a用户下周三去上海出差\uff0c需要浦东机场附近的酒店。"  # the probe's line


async def test_an_llm_answer_past_the_characters_loses_its_first_lines() -> None:
    """Found by an exploratory probe: an answer past ENGRAM_SESSION_SUMMARY_MAX_CHARS was
    cut at its end, the lines the turns just folded made."""
    answer = "\n".join([*FACT_LINES, *FACT_LINES[:20], "- Dana moved the trip to 19 March."])
    assert len(answer) > 4000
    out = await LLMSummariser(FakeLLM(answer)).fold(None, [turn(1, "x")], 4000)
    assert len(out) <= 4000
    assert out.endswith("\n- Dana moved the trip to 19 March.")
    assert answer.endswith("\n" + out)
    kept = len(out.split("\n"))
    assert len("\n".join(answer.split("\n")[-kept - 1:])) > 4000  # as many as fit


async def test_an_llm_answer_past_the_tokens_in_mixed_scripts_loses_its_first_lines() -> None:
    """Found by an exploratory probe: an English summary, then Chinese turns: the answer
    was cut at its end, to the characters the average of the two makes, and the line
    about the turns just folded was lost."""
    chinese = [turn(3, "用户说下周三去上海出差。" * 20), turn(4, "助手答应找浦东的酒店。" * 22,
                                                role="assistant")]
    fits = "\n".join([*FACT_LINES, SHANGHAI])
    assert len(fits) < 4000
    assert estimate_tokens(fits) < 1000
    llm = FakeLLM(fits)
    out = await LLMSummariser(llm).fold("\n".join(FACT_LINES), chinese, 4000)
    assert out == fits  # within both caps: whole, whatever the prompt asked
    asked = int(llm.calls[0][1].split("at most ", 1)[1].split(" ", 1)[0])
    assert asked < len(fits)  # the prompt's number is only a guide

    too_many_tokens = "\n".join([*FACT_LINES[:30], *(f"{SHANGHAI}{n}" for n in range(25))])
    assert len(too_many_tokens) < 4000
    assert estimate_tokens(too_many_tokens) > 1000
    out = await LLMSummariser(FakeLLM(too_many_tokens)).fold(None, chinese, 4000)
    assert estimate_tokens(out) <= 1000
    assert too_many_tokens.endswith("\n" + out)
    assert out.endswith(f"{SHANGHAI}24")


@pytest.mark.parametrize("answer", ["alpha beta gamma delta epsilon", "会议记录" * 20,
                                    "Eve is 25.\n" + "alpha beta gamma delta epsilon"])
async def test_an_llm_answer_whose_last_line_alone_is_too_long_is_a_failed_fold(
        answer: str) -> None:
    """Its last line holds the turns just folded: any cut of it lost some of them while
    the cursor moved past them, so the fold fails, is tried again, and counts for the
    summariser's health."""
    with pytest.raises(SummaryFailed) as caught:
        await LLMSummariser(FakeLLM(answer)).fold(None, [turn(1, "x")], 20)
    assert caught.value.code == "llm_answer_too_long"
    assert caught.value.detail.endswith("at most 20 characters and 5 tokens")


async def test_llm_error_becomes_summary_failed_with_its_code() -> None:
    llm = FakeLLM(error=LLMError("upstream said 500", code="llm_http_error"))
    with pytest.raises(SummaryFailed) as caught:
        await LLMSummariser(llm).fold(None, [turn(1, "x")], 100)
    assert caught.value.code == "llm_http_error"
    assert caught.value.detail == "upstream said 500"
    assert isinstance(caught.value.__cause__, LLMError)


async def test_timeout_becomes_summary_failed_llm_timeout() -> None:
    llm = FakeLLM(error=TimeoutError())
    with pytest.raises(SummaryFailed) as caught:
        await LLMSummariser(llm).fold(None, [turn(1, "x")], 100)
    assert caught.value.code == "llm_timeout"


@pytest.mark.parametrize("answer", ["", "   \n\t ", "\x00\x00", " \x00 \n"])
async def test_empty_answer_becomes_summary_failed(answer: str) -> None:
    with pytest.raises(SummaryFailed) as caught:
        await LLMSummariser(FakeLLM(answer)).fold(None, [turn(1, "x")], 100)
    assert caught.value.code == "llm_empty_answer"


async def test_nul_characters_are_stripped_from_the_answer() -> None:
    out = await LLMSummariser(FakeLLM("Eve\x00 is\x00 25.\x00")).fold(None, [turn(1, "x")], 100)
    assert out == "Eve is 25."
    assert "\x00" not in out


@pytest.mark.parametrize("answer", [
    "<think>The user wants Eve's age. Eve said 25.</think>\n\nEve is 25.",
    "  <THINKING>\nfirst\n</THINKING><think>second</think> Eve is 25.",
    "<reasoning>a</reasoning >Eve is 25.",
])
async def test_the_reasoning_a_model_opens_with_is_not_kept(answer: str) -> None:
    out = await LLMSummariser(FakeLLM(answer)).fold(None, [turn(1, "x")], 100)
    assert out == "Eve is 25."


async def test_a_tag_inside_the_summary_is_kept() -> None:
    answer = "Eve wrote the <think> tag into her notes."
    assert await LLMSummariser(FakeLLM(answer)).fold(None, [turn(1, "x")], 100) == answer


async def test_an_answer_cut_off_in_its_reasoning_is_an_empty_one() -> None:
    with pytest.raises(SummaryFailed) as caught:
        await LLMSummariser(FakeLLM("<think>Eve is 25, so the summary")).fold(
            None, [turn(1, "x")], 100)
    assert caught.value.code == "llm_empty_answer"


def test_summary_failed_carries_code_and_detail() -> None:
    err = SummaryFailed("llm_timeout", "slow")
    assert (err.code, err.detail, str(err)) == ("llm_timeout", "slow", "llm_timeout: slow")


@pytest.mark.parametrize("turns", [5, 6, 9])
def test_a_degraded_summariser_is_not_promised_in_the_fold_warning(turns: int) -> None:
    """Found by a sessions probe: while degraded the warning said the turns "will be
    summarised now", with the context truncated and the folds waiting."""
    warning = fold_warning(session(turns=turns, health=Health("degraded")), FOLD)
    assert warning == (
        "The summariser of this session is failing: its oldest turns wait to be "
        "summarised, and may leave the context unsummarised; store anything critical from "
        "them as a memory (POST /v1/memories) first.")
    assert fold_warning(session(turns=3, health=Health("degraded")), FOLD) is None


@pytest.mark.parametrize("text", ["会议记录" * 500, "plain words " * 300,
                                  "mixed 会议 words " * 200, "短"])
@pytest.mark.parametrize("tokens", [1, 7, 250])
def test_within_tokens_is_the_longest_clip_that_fits(text: str, tokens: int) -> None:
    kept = within_tokens(text, tokens)
    assert estimate_tokens(kept) <= max(tokens, 1)
    assert text.startswith(kept.rstrip("…"))
    if kept != text:  # the longest that fits: a larger allowance keeps more
        assert estimate_tokens(within_tokens(text, tokens + 50)) > estimate_tokens(kept)


ENGLISH_LINE = "- user: Dana booked the 9:40 train to Porto for the trip."
CHINESE_LINE = "- user: " + "会议预算四千二百欧元" * 20


@pytest.mark.parametrize("tokens", [1, 20, 60, 250, 400, 10_000])
def test_newest_lines_within_leaves_out_the_oldest_lines_first(tokens: int) -> None:
    """An English summary with Chinese lines folded after it: the lines are the oldest
    first, and a cut at the end lost the newest."""
    lines = [*(f"{ENGLISH_LINE} ({i})" for i in range(10)),
             *(f"{CHINESE_LINE}{i}" for i in range(3))]
    text = "\n".join(lines)
    kept = newest_lines_within(text, 10_000, tokens)
    if estimate_tokens(text) <= tokens:
        assert kept == text
    elif estimate_tokens(lines[-1]) <= tokens:
        # Whole lines, the newest, as many as fit.
        assert kept is not None
        assert estimate_tokens(kept) <= tokens
        taken = kept.split("\n")
        assert taken == lines[-len(taken):]
        assert estimate_tokens("\n".join(lines[-len(taken) - 1:])) > tokens
    else:  # the newest line alone is too long: no cut of it is kept
        assert kept is None


@pytest.mark.parametrize("max_chars", [60, 200, 500, 1000, 10_000])
def test_newest_lines_within_holds_the_characters_by_the_oldest_lines_too(
        max_chars: int) -> None:
    lines = [f"{ENGLISH_LINE} ({i})" for i in range(30)]
    text = "\n".join(lines)
    kept = newest_lines_within(text, max_chars, 10_000)
    if len(lines[-1]) > max_chars:
        assert kept is None
        return
    assert kept is not None
    assert len(kept) <= max_chars
    taken = kept.split("\n")
    assert taken == lines[-len(taken):]
    assert len("\n".join(lines[-len(taken) - 1:])) > max_chars or kept == text


def test_newest_lines_within_keeps_what_fits_whole() -> None:
    assert newest_lines_within(CHINESE_LINE, 10_000, 10_000) == CHINESE_LINE
    assert newest_lines_within("short", 50, 50) == "short"
    assert newest_lines_within(CHINESE_LINE, 10_000, 50) is None
