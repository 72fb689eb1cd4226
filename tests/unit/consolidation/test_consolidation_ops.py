"""Golden tests for the ops: fixed entries in, exact summary, represented ids and mode out."""

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from app.consolidation.ops import (
    Abstractive,
    Concatenate,
    DensityRouting,
    Extractive,
    LLMSynthesis,
    OpError,
)
from app.consolidation.ops.facts import (
    carries_fact,
    fact_density,
    join_sentences,
    split_sentences,
)
from app.consolidation.ops.prompts import ENTRY_SYSTEM, SYNTHESIS_SYSTEM
from app.consolidation.types import Entry, OpContext
from app.providers.llm import LLMError
from tests.fakes.llm_server import FakeLLM, llm_error

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def entry(n: int, content: str, minute: int | None = None) -> Entry:
    return Entry(
        id=uuid.UUID(int=n),
        content=content,
        category="travel",
        importance=0.5,
        created_at=T0 + timedelta(minutes=n if minute is None else minute),
    )


def uid(*ns: int) -> tuple[uuid.UUID, ...]:
    return tuple(uuid.UUID(int=n) for n in ns)


ALICE = entry(1, "Alice moved to Berlin on 2023-05-01. She loves it there.")
TEA = entry(2, "The user likes green tea. It helps them focus.")
BOB = entry(3, "Meeting with Bob is at 10:30 on Friday.\nWe should bring snacks.")
ALICE_AGAIN = entry(4, "Alice moved to  Berlin on 2023-05-01.")
GROUP = [BOB, ALICE_AGAIN, TEA, ALICE]  # out of order on purpose: ops sort oldest first

OFFLINE = OpContext()


# concatenate --------------------------------------------------------------------------


async def test_concatenate_is_a_bullet_list_oldest_first() -> None:
    result = await Concatenate().consolidate(GROUP, "travel", OFFLINE)

    assert result.summary == (
        "- Alice moved to Berlin on 2023-05-01. She loves it there.\n"
        "- The user likes green tea. It helps them focus.\n"
        "- Meeting with Bob is at 10:30 on Friday.\n"
        "  We should bring snacks.\n"
        "- Alice moved to  Berlin on 2023-05-01."
    )
    assert result.represented_ids == uid(1, 2, 3, 4)
    assert result.mode == "concatenate"


async def test_concatenate_ends_lines_at_cr_and_lf_only() -> None:
    """A probe: a memory's own U+2028, NEL or form feed cut its bullet into indented
    pieces, as str.splitlines() breaks there."""
    odd = entry(5, "one\u2028two\x85three\x0cfour\r\nfive\rsix")

    result = await Concatenate().consolidate([odd], "travel", OFFLINE)

    assert result.summary == "- one\u2028two\x85three\x0cfour\n  five\n  six"


async def test_concatenate_cuts_at_entry_boundaries_and_represents_only_whole_entries() -> None:
    # Room for ALICE and ALICE_AGAIN (first fit), not for TEA or BOB.
    limit = (
        len("- Alice moved to Berlin on 2023-05-01. She loves it there.")
        + 1
        + len("- Alice moved to  Berlin on 2023-05-01.")
    )

    result = await Concatenate(max_chars=limit).consolidate(GROUP, "travel", OFFLINE)

    assert result.summary == (
        "- Alice moved to Berlin on 2023-05-01. She loves it there.\n"
        "- Alice moved to  Berlin on 2023-05-01."
    )
    assert len(result.summary) == limit
    assert result.represented_ids == uid(1, 4)


async def test_concatenate_respects_the_context_summary_limit() -> None:
    context = OpContext(max_summary_chars=40)

    result = await Concatenate(max_chars=4000).consolidate(GROUP, "travel", context)

    assert result.summary == "- Alice moved to  Berlin on 2023-05-01."
    assert result.represented_ids == uid(4)


async def test_concatenate_with_nothing_that_fits_fails_rather_than_cutting_an_entry() -> None:
    with pytest.raises(OpError) as caught:
        await Concatenate(max_chars=10).consolidate(GROUP, "travel", OFFLINE)
    assert caught.value.code == "op_nothing_fits"


# extractive ---------------------------------------------------------------------------


def test_fact_heuristic_sees_names_numbers_and_dates() -> None:
    assert carries_fact("Alice moved to Berlin.")
    assert carries_fact("the flight leaves at 9:40")
    assert carries_fact("We meet on Friday.")
    assert carries_fact("March was busy.")  # a month opening the sentence
    assert carries_fact("Write to ops@example.com")
    assert carries_fact("the review is tomorrow")
    assert not carries_fact("The user likes green tea.")
    assert not carries_fact("I think it helps them focus.")
    assert not carries_fact("It was fine, OK?")


def test_numbers_days_and_months_in_lower_case_are_facts() -> None:
    # Found by an exploratory probe: these lost their sentence to their memory's first
    # one, and an archive run archived the memory.
    assert carries_fact("the budget is three hundred dollars.")
    assert carries_fact("the appointment is on friday.")
    assert carries_fact("we fly out in september")
    assert not carries_fact("i may go if it suits everyone.")
    assert not carries_fact("no one likes it.")


def test_sentences_split_on_ends_and_lines_but_not_decimals() -> None:
    assert split_sentences("Pi is 3.14! Really? yes\n\nnew line") == [
        "Pi is 3.14!",
        "Really?",
        "yes",
        "new line",
    ]


def test_sentences_end_at_ideographic_marks_with_no_blank_after_them() -> None:
    """A probe of non-English text: "。" was no break, so a Chinese memory was one
    sentence, and the extractive op kept all of it or, with no fact in it, nothing."""
    bang, question, colon, stop = "\uff01", "\uff1f", "\uff1a", "\uff0e"  # full-width
    assert split_sentences(f"我明天去北京。他很高兴{bang}你呢{question}") == [
        "我明天去北京。", f"他很高兴{bang}", f"你呢{question}"]
    # The closing quote stays with its sentence; a Latin mark still needs a blank.
    assert split_sentences(f"他说{colon}「我明天去。」然后走了。") == [
        f"他说{colon}「我明天去。」", "然后走了。"]
    assert split_sentences(f"東京に住んでいます。 猫が二匹います{stop}v1.2 ok") == [
        "東京に住んでいます。", f"猫が二匹います{stop}", "v1.2 ok"]
    # A re-probe: a full-width decimal point, and a run of marks, are no break.
    three, one, four = "\uff13", "\uff11", "\uff14"
    assert split_sentences(f"円周率は{three}{stop}{one}{four}です。") == [
        f"円周率は{three}{stop}{one}{four}です。"]
    assert split_sentences(f"本当{question}{bang}すごい。") == [f"本当{question}{bang}", "すごい。"]


def test_sentences_are_joined_as_their_script_writes_them() -> None:
    assert join_sentences(["Alice moved.", "She loves it."]) == "Alice moved. She loves it."
    assert join_sentences(["我住在北京。", "「好。」", "Alice moved.", "猫。"]) == (
        "我住在北京。「好。」Alice moved. 猫。")


def test_a_sentence_in_a_script_without_capitals_counts_as_a_fact() -> None:
    # Its names cannot show by their case, so it leans towards "fact", as the rest does.
    assert carries_fact("他很高兴。")
    # A Latin word inside a Chinese or Japanese run is part of one token (a re-probe).
    assert carries_fact("私はPythonが好きです。")
    assert carries_fact("我在Google工作。")
    assert carries_fact("안녕하세요 반가워요")
    assert carries_fact("مرحبا بك")
    # Georgian letters are lower case to Unicode, but the script is written without
    # capitals: "My cat is called Tsitsi." was dropped (an exploratory probe).
    assert carries_fact("ჩემს კატას ჰქვია ციცი.")
    assert not carries_fact("the cat sat on the mat")  # a cased script is still read
    assert not carries_fact("... !!")


async def test_extractive_keeps_each_sentence_of_a_text_without_capitals() -> None:
    chinese = entry(5, "我住在北京。我有两只猫。我喜欢喝茶。")

    result = await Extractive().consolidate([chinese, TEA], "travel", OFFLINE)

    assert result.summary == ("- The user likes green tea.\n"
                              "- 我住在北京。我有两只猫。我喜欢喝茶。")  # joined as written


def test_fact_density_counts_fact_tokens_per_token() -> None:
    assert fact_density(ALICE.content) == pytest.approx(3 / 10)
    assert fact_density(TEA.content) == 0.0
    assert fact_density("") == 0.0


async def test_extractive_collapses_spellings_of_one_sentence() -> None:
    composed = entry(5, "Zo\u00eb moved to Paris in 2020.")
    spellings = [entry(6, "Zoe\u0308 moved to Paris in 2020."),
                 entry(7, "Zo\u00eb\u00a0moved to  Paris in 2020."),
                 entry(8, "ZO\u00cb MOVED TO PARIS IN 2020.")]

    result = await Extractive().consolidate([composed, *spellings], "travel", OFFLINE)

    assert result.summary == "- Zo\u00eb moved to Paris in 2020."


async def test_extractive_keeps_a_trace_of_each_line_of_a_summary_it_folds() -> None:
    # Found by an exploratory probe: read whole, a summary of three notes with no fact
    # word kept its first line only, and the run archived it with the notes it held.
    summary = replace(entry(9, "- i like green tea.\n- we walk by the river most evenings."
                               "\n- the garden gate code is the one we chose. it sticks."),
                      fact_role="summary", summary_of=uid(1, 2, 3))
    note = entry(10, "we repainted the fence.")

    result = await Extractive().consolidate([summary, note], "travel", OFFLINE)

    assert result.summary == (
        "- i like green tea. we walk by the river most evenings. the garden gate code is "
        "the one we chose.\n- we repainted the fence.")
    assert result.represented_ids == uid(9, 10)


async def test_extractive_keeps_codes_told_in_another_case_apart() -> None:
    # Found by an exploratory probe: the newer token was folded away as the older's copy.
    old = entry(1, "Token for staging: AbC9xQ.")
    new = entry(2, "Token for staging: abc9xq.")
    again = entry(3, "token FOR staging: AbC9xQ.")

    result = await Extractive().consolidate([old, new, again], "travel", OFFLINE)

    assert result.summary == "- Token for staging: AbC9xQ.\n- Token for staging: abc9xq."
    assert result.represented_ids == uid(1, 2, 3)


async def test_extractive_keeps_fact_sentences_and_collapses_duplicates() -> None:
    result = await Extractive().consolidate(GROUP, "travel", OFFLINE)

    assert result.summary == (
        "- Alice moved to Berlin on 2023-05-01.\n"
        "- The user likes green tea.\n"  # no fact: its first sentence stays as a trace
        "- Meeting with Bob is at 10:30 on Friday."
    )
    # ALICE_AGAIN adds nothing new, yet is represented: its facts are in the summary.
    assert result.represented_ids == uid(1, 2, 3, 4)
    assert result.mode == "extractive"


async def test_extractive_does_not_count_a_duplicate_whose_original_did_not_fit() -> None:
    long_first = entry(1, "Alice moved to Berlin on 2023-05-01. Her flat is at Main Street 5.")
    short_again = entry(2, "Alice moved to Berlin on 2023-05-01.")
    limit = len("- Alice moved to Berlin on 2023-05-01.")

    result = await Extractive(max_chars=limit).consolidate(
        [long_first, short_again], "travel", OFFLINE
    )

    # The first entry did not fit, so the second brings its sentence in itself.
    assert result.summary == "- Alice moved to Berlin on 2023-05-01."
    assert result.represented_ids == uid(2)


# abstractive --------------------------------------------------------------------------


async def test_abstractive_summarises_each_entry_with_the_llm() -> None:
    llm = FakeLLM()

    result = await Abstractive().consolidate(GROUP, "travel", OpContext(llm=llm))

    assert result.summary == (
        "- Summary: Alice moved to Berlin on 2023-05-01. She loves it there.\n"
        "- Summary: The user likes green tea. It helps them focus.\n"
        "- Summary: Meeting with Bob is at 10:30 on Friday. We should bring snacks.\n"
        "- Summary: Alice moved to  Berlin on 2023-05-01."
    )
    assert result.represented_ids == uid(1, 2, 3, 4)
    assert result.mode == "abstractive"
    assert result.detail is None
    assert llm.calls[0] == (
        ENTRY_SYSTEM,
        "Category: travel\nMemory:\n\nAlice moved to Berlin on 2023-05-01. She loves it there.",
    )


async def test_abstractive_leaves_out_entries_whose_call_failed_or_came_back_empty() -> None:
    llm = FakeLLM.scripted(["Alice lives in Berlin.", llm_error(), "   ", "Alice, again."])

    result = await Abstractive().consolidate(GROUP, "travel", OpContext(llm=llm))

    assert result.summary == "- Alice lives in Berlin.\n- Alice, again."
    assert result.represented_ids == uid(1, 4)
    assert result.detail == "2 entries not summarised: llm_http_error"


async def test_abstractive_leaves_out_an_entry_whose_summary_is_past_the_limit() -> None:
    # Found by an exploratory probe: a summary past the limit was cut, and its entry
    # archived with whatever the cut dropped. Now the entry stays for the next run.
    llm = FakeLLM.scripted(["Alice lives in Berlin.", "tea " * 20, "Bob at 10:30.",
                            "Alice, again."])

    result = await Abstractive(max_chars=60).consolidate(GROUP, "travel",
                                                         OpContext(llm=llm))

    assert result.summary == "- Alice lives in Berlin.\n- Bob at 10:30.\n- Alice, again."
    assert result.represented_ids == uid(1, 3, 4)
    assert result.detail == "1 entries not summarised: llm_answer_too_long"


async def test_abstractive_fails_with_the_llm_error_when_nothing_was_summarised() -> None:
    llm = FakeLLM.scripted([llm_error("llm_timeout")] * 4)

    with pytest.raises(LLMError) as caught:
        await Abstractive().consolidate(GROUP, "travel", OpContext(llm=llm))
    assert caught.value.code == "llm_timeout"


async def test_abstractive_bounds_its_concurrent_calls() -> None:
    llm = FakeLLM(delay=0.01)
    many = [entry(n, f"note {n}") for n in range(1, 11)]

    await Abstractive(max_concurrency=3).consolidate(many, "travel", OpContext(llm=llm))

    assert len(llm.calls) == 10
    assert llm.max_in_flight == 3


async def test_abstractive_without_an_llm_is_an_op_error() -> None:
    with pytest.raises(OpError) as caught:
        await Abstractive().consolidate(GROUP, "travel", OFFLINE)
    assert caught.value.code == "llm_not_configured"


# llm_synthesis ------------------------------------------------------------------------

FULL_PROMPT = (
    "Category: travel\nAnswer in at most 4000 characters.\n4 memories, oldest first:\n\n"
    "- Alice moved to Berlin on 2023-05-01. She loves it there.\n"
    "- The user likes green tea. It helps them focus.\n"
    "- Meeting with Bob is at 10:30 on Friday.\n"
    "  We should bring snacks.\n"
    "- Alice moved to  Berlin on 2023-05-01."
)
CONCATENATED = (
    "- Alice moved to Berlin on 2023-05-01. She loves it there.\n"
    "- The user likes green tea. It helps them focus.\n"
    "- Meeting with Bob is at 10:30 on Friday.\n"
    "  We should bring snacks.\n"
    "- Alice moved to  Berlin on 2023-05-01."
)


async def test_llm_synthesis_sends_one_prompt_and_keeps_the_answer() -> None:
    llm = FakeLLM()

    result = await LLMSynthesis().consolidate(GROUP, "travel", OpContext(llm=llm))

    assert llm.calls == [(SYNTHESIS_SYSTEM, FULL_PROMPT)]
    assert result.summary == (
        "Summary: Alice moved to Berlin on 2023-05-01. She loves it there. "
        "The user likes green tea. It helps them focus. "
        "Meeting with Bob is at 10:30 on Friday. We should bring snacks. "
        "Alice moved to  Berlin on 2023-05-01."
    )
    assert result.represented_ids == uid(1, 2, 3, 4)
    assert (result.mode, result.detail) == ("llm_synthesis", None)


async def test_an_llm_answer_past_the_limit_falls_back_to_concatenate() -> None:
    # Found by exploratory probes: a 10,000-character answer was kept as its first 4,000
    # (with `detail: null`, later with the cut said), and an archive run then archived
    # every source, the facts past the cut included. The prompt states the limit.
    llm = FakeLLM.scripted(["word " * 2000])

    result = await LLMSynthesis(max_chars=4000).consolidate(GROUP, "travel",
                                                            OpContext(llm=llm))

    assert "Answer in at most 4000 characters." in llm.calls[0][1]
    assert result.summary == CONCATENATED
    assert result.represented_ids == uid(1, 2, 3, 4)
    assert result.mode == "fallback:concatenate"
    assert result.detail == "llm_answer_too_long: 9999 characters, at most 4000"


async def test_llm_synthesis_prompt_cap_represents_only_the_entries_that_fit() -> None:
    llm = FakeLLM.scripted(["Alice moved to Berlin and likes green tea."])
    # Room for the header (sized for 4) and the first two bullets only.
    cap = (
        len(SYNTHESIS_SYSTEM)
        + len("Category: travel\nAnswer in at most 4000 characters.\n"
              "4 memories, oldest first:\n\n")
        + len("- Alice moved to Berlin on 2023-05-01. She loves it there.\n")
        + len("- The user likes green tea. It helps them focus.")
    )

    result = await LLMSynthesis(max_prompt_chars=cap).consolidate(
        GROUP, "travel", OpContext(llm=llm)
    )

    assert llm.calls[0][1] == (
        "Category: travel\nAnswer in at most 4000 characters.\n2 memories, oldest first:\n\n"
        "- Alice moved to Berlin on 2023-05-01. She loves it there.\n"
        "- The user likes green tea. It helps them focus."
    )
    assert result.summary == "Alice moved to Berlin and likes green tea."
    assert result.represented_ids == uid(1, 2)


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (llm_error("llm_http_error"), "llm_http_error"),
        (llm_error("llm_timeout"), "llm_timeout"),
        (TimeoutError(), "llm_timeout"),
        ("", "llm_empty_answer"),
        (" \n\x00 ", "llm_empty_answer"),
        ("<think>Alice went to Berlin, so", "llm_empty_answer"),
    ],
)
async def test_llm_synthesis_falls_back_to_concatenate(
    answer: str | BaseException, reason: str
) -> None:
    llm = FakeLLM.scripted([answer])

    result = await LLMSynthesis().consolidate(GROUP, "travel", OpContext(llm=llm))

    assert result.summary == CONCATENATED
    assert result.represented_ids == uid(1, 2, 3, 4)
    assert (result.mode, result.detail) == ("fallback:concatenate", reason)


async def test_llm_synthesis_without_an_llm_or_room_in_the_prompt_falls_back() -> None:
    no_llm = await LLMSynthesis().consolidate(GROUP, "travel", OFFLINE)
    no_room = await LLMSynthesis(max_prompt_chars=100).consolidate(
        GROUP, "travel", OpContext(llm=FakeLLM())
    )

    assert (no_llm.mode, no_llm.detail) == ("fallback:concatenate", "llm_not_configured")
    assert (no_room.mode, no_room.detail) == ("fallback:concatenate", "prompt_cap_too_small")
    assert no_room.summary == CONCATENATED


async def test_llm_synthesis_fallback_uses_its_own_length_limit() -> None:
    llm = FakeLLM.scripted([llm_error()])

    result = await LLMSynthesis(fallback_max_chars=40).consolidate(
        GROUP, "travel", OpContext(llm=llm)
    )

    assert result.summary == "- Alice moved to  Berlin on 2023-05-01."
    assert result.represented_ids == uid(4)


async def test_llm_synthesis_cleans_the_answer_and_measures_it_cleaned() -> None:
    answer = "  Alice\x00 lives in Berlin \ud800and drinks tea.  "
    llm = FakeLLM.scripted([answer, answer])
    fits = len("Alice lives in Berlin and drinks tea.")

    kept = await LLMSynthesis(max_chars=fits).consolidate(GROUP, "travel",
                                                          OpContext(llm=llm))
    over = await LLMSynthesis(max_chars=fits - 1).consolidate(GROUP, "travel",
                                                              OpContext(llm=llm))

    assert (kept.summary, kept.mode) == ("Alice lives in Berlin and drinks tea.",
                                         "llm_synthesis")
    assert over.mode == "fallback:concatenate"
    assert over.detail == f"llm_answer_too_long: {fits} characters, at most {fits - 1}"


async def test_llm_synthesis_keeps_no_reasoning() -> None:
    llm = FakeLLM.scripted(["<think>Four entries about Alice.</think>\nAlice lives in Berlin."])

    result = await LLMSynthesis().consolidate(GROUP, "travel", OpContext(llm=llm))

    assert (result.summary, result.mode) == ("Alice lives in Berlin.", "llm_synthesis")


@pytest.mark.parametrize("answer", [
    "Okay, four entries about Alice.\n</think>\n\nAlice lives in Berlin.",
    "Let me see, four entries.</Thinking>\nAlice lives in Berlin.",
])
async def test_llm_synthesis_keeps_no_reasoning_whose_opening_tag_was_the_prompts(
    answer: str,
) -> None:
    """DeepSeek-R1's template puts "<think>" in the prompt, so the answer starts inside
    the reasoning and only its end tag shows; the reasoning was stored as the summary
    (an exploratory probe)."""
    result = await LLMSynthesis().consolidate(GROUP, "travel", OpContext(
        llm=FakeLLM.scripted([answer])))

    assert result.summary == "Alice lives in Berlin."


@pytest.mark.parametrize("answer", [
    "- Alice's parser splits output at </think> and keeps the rest.",
    "- Alice lives in Berlin.\n- Her notes mention a </THINKING> tag.",
])
async def test_an_end_tag_inside_a_line_is_the_summarys_own_text(answer: str) -> None:
    """A re-probe: a memory about a parser of such tags lost everything before one."""
    result = await LLMSynthesis().consolidate(GROUP, "travel", OpContext(
        llm=FakeLLM.scripted([answer])))

    assert result.summary == answer


async def test_an_end_tag_after_a_whole_reasoning_block_is_the_answers_own() -> None:
    result = await LLMSynthesis().consolidate(GROUP, "travel", OpContext(
        llm=FakeLLM.scripted(["<think>Hm.</think>Use </think> to close it."])))

    assert result.summary == "Use </think> to close it."


# density_routing ----------------------------------------------------------------------

SPARSE = [
    entry(11, "The user prefers short answers."),
    entry(12, "It was a calm and pleasant chat about nothing much."),
    entry(13, "Alice said hello."),
]


async def test_density_routing_sends_a_dense_group_to_extractive() -> None:
    llm = FakeLLM()

    result = await DensityRouting().consolidate(GROUP, "travel", OpContext(llm=llm))

    assert result.summary == (
        "- Alice moved to Berlin on 2023-05-01.\n"
        "- The user likes green tea.\n"
        "- Meeting with Bob is at 10:30 on Friday."
    )
    assert result.represented_ids == uid(1, 2, 3, 4)
    assert (result.mode, result.detail) == ("dense:extractive", "3/4 dense")
    assert llm.calls == []


async def test_density_routing_sends_a_sparse_group_to_abstractive() -> None:
    result = await DensityRouting().consolidate(SPARSE, "chat", OpContext(llm=FakeLLM()))

    assert result.summary == (
        "- Summary: The user prefers short answers.\n"
        "- Summary: It was a calm and pleasant chat about nothing much.\n"
        "- Summary: Alice said hello."
    )
    assert result.represented_ids == uid(11, 12, 13)
    assert (result.mode, result.detail) == ("sparse:abstractive", "1/3 dense")


async def test_density_routing_tie_goes_to_extractive() -> None:
    result = await DensityRouting().consolidate([ALICE, TEA], "travel", OpContext())

    assert (result.mode, result.detail) == ("dense:extractive", "1/2 dense")


def test_fact_heuristic_reads_typographic_apostrophes() -> None:
    assert not carries_fact("We\u2019re happy with it.")
    assert not carries_fact("I\u2019m not sure.")
    assert carries_fact("Alice\u2019s cat is called Tom.")
