"""`POST /v1/search` over HTTP with the real local all-MiniLM-L6-v2 model on a small fixed
corpus: concrete orderings (the fact that answers a question outranks the summary that
covers it; a summary-style question gets the summary first, and among several summaries the
one whose sources are about the asked topic), a paraphrase found through
the vector list, a question about nothing stored answered with an empty list, and scope
filters that never leak."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.ids import uuid7
from app.resources import Resources
from app.settings import LOCAL_MODEL_MIN_SIMILARITY
from tests.conftest import TenantKey, create_tenant_key, local_model, make_client, sample

pytestmark = pytest.mark.model

CREATED_AT = datetime(2026, 1, 5, 12, tzinfo=UTC)

ALICE_FACTS = {
    "nurse": "Alice works as a nurse at the city hospital",
    "flight": "Alice is flying to Lisbon on June 3rd",
    "hotel": "Alice booked a hotel in the Alfama district for the Lisbon trip",
    "tower": "Alice wants to see the Belem tower while she is in Lisbon",
    "budget": "Alice set a budget of 1500 euros for the Lisbon trip",
    "peanuts": "Alice is allergic to peanuts",
    "cello": "Alice plays the cello in a community orchestra",
    "sister": "Alice's sister Maria lives in Porto",
}
BOB_FACTS = {
    "engineer": "Bob is a software engineer at a fintech startup",
    "marathon": "Bob is training for the Berlin marathon in September",
    "beagle": "Bob adopted a beagle named Pixel",
    "window": "Bob prefers window seats on long flights",
    "japanese": "Bob is learning Japanese on weekends",
    "risotto": "Bob's favourite dish is mushroom risotto",
    "kyoto": "Bob is planning a trip to Kyoto next spring",
}
# What consolidation would write for the Lisbon conversation: it covers four of Alice's facts.
TRIP_SUMMARY = (
    "Summary of the conversation about Alice's Lisbon trip: she flies to Lisbon on June 3rd, "
    "booked a hotel in the Alfama district, wants to see the Belem tower, and set a budget "
    "of 1500 euros."
)
SUMMARY_COVERS = ("flight", "hotel", "tower", "budget")


@dataclass(frozen=True)
class Corpus:
    tenant: TenantKey
    ids: dict[str, str]  # fact key (or "summary") -> memory id
    users: dict[str, str]  # memory id -> user_id

    def key(self, memory_id: str) -> str:
        return next(k for k, v in self.ids.items() if v == memory_id)


@pytest.fixture(scope="module")
async def model_resources(resources: Resources) -> AsyncIterator[Resources]:
    """The local embedder's settings, so its default relevance floor (the hash one's is off)."""
    async with local_model(resources) as model:
        assert model.settings.min_similarity == LOCAL_MODEL_MIN_SIMILARITY
        yield model


@pytest.fixture(scope="module")
async def corpus(model_resources: Resources) -> Corpus:
    """One tenant holding the corpus, written once: the tests only read it."""
    tenant = await create_tenant_key(model_resources)
    keys = [*ALICE_FACTS, *BOB_FACTS]
    created = []
    async with make_client(model_resources, tenant.headers) as client:
        # One request per fact, a few milliseconds apart: ids are time-ordered, so equal
        # full-text scores (ordered by id) tie-break the same way on every run.
        for user, facts in (("alice", ALICE_FACTS), ("bob", BOB_FACTS)):
            for content in facts.values():
                resp = await client.post("/v1/memories", json={
                    "content": content, "user_id": user, "created_at": CREATED_AT.isoformat()})
                assert resp.status_code == 201, resp.text
                created.append(resp.json())
                await asyncio.sleep(0.003)
    ids = {key: m["id"] for key, m in zip(keys, created, strict=True)}
    users = {m["id"]: m["user_id"] for m in created}

    summary_id = await insert_summary(model_resources, tenant, TRIP_SUMMARY, "alice",
                                      [ids[k] for k in SUMMARY_COVERS])
    ids["summary"] = summary_id
    users[str(summary_id)] = "alice"
    return Corpus(tenant, ids, users)


async def insert_summary(resources: Resources, tenant: TenantKey, content: str, user: str,
                         summary_of: list[str]) -> str:
    """A summary row as consolidation writes one, with the given text (an op's output need
    not mention what its sources are about)."""
    (vector,) = await resources.embedder.embed([content])
    summary_id = uuid7()
    async with resources.sessionmaker() as session:
        await session.execute(
            text(
                "INSERT INTO memories (tenant_id, id, content, user_id, fact_role, source,"
                " summary_of, importance, created_at, embedding) VALUES (:tenant_id, :id,"
                " :content, :user_id, 'summary', 'summary', CAST(:summary_of AS uuid[]), 0.7,"
                " :created_at, CAST(:embedding AS halfvec(384)))"
            ),
            {
                "tenant_id": tenant.tenant_id, "id": summary_id, "content": content,
                "user_id": user, "summary_of": [uuid.UUID(i) for i in summary_of],
                "created_at": CREATED_AT,
                "embedding": "[" + ",".join(f"{x:.6f}" for x in vector) + "]",
            },
        )
        await session.commit()
    return str(summary_id)


@pytest.fixture
async def model_client(model_resources: Resources,
                       corpus: Corpus) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(model_resources, corpus.tenant.headers) as c:
        yield c


@pytest.fixture
async def unfloored_client(model_resources: Resources,
                           corpus: Corpus) -> AsyncIterator[httpx.AsyncClient]:
    """Every candidate kept (search_min_similarity -1), so a scope's whole content shows."""
    settings = model_resources.settings.model_copy(update={"search_min_similarity": -1.0})
    async with make_client(replace(model_resources, settings=settings),
                           corpus.tenant.headers) as c:
        yield c


async def search(client: httpx.AsyncClient, query: str, **body: Any) -> dict[str, Any]:
    resp = await client.post("/v1/search", json={"query": query, "explain": True, **body})
    assert resp.status_code == 200, resp.text
    answer: dict[str, Any] = resp.json()
    scores = [r["score"] for r in answer["results"]]
    assert scores == sorted(scores, reverse=True)
    return answer


def ranking(corpus: Corpus, answer: dict[str, Any]) -> list[str]:
    return [corpus.key(r["memory"]["id"]) for r in answer["results"]]


# --- the fact beats the summary that covers it; a summary question gets the summary -----------


@pytest.mark.parametrize(("question", "answer_key"), [
    ("Which hotel did Alice book?", "hotel"),
    ("When does Alice fly to Lisbon?", "flight"),
    ("What budget did Alice set for the trip?", "budget"),
    ("Which landmark does Alice want to see in Lisbon?", "tower"),
])
async def test_the_fact_that_answers_a_question_outranks_the_summary_covering_it(
    model_client: httpx.AsyncClient, corpus: Corpus, question: str, answer_key: str,
) -> None:
    answer = await search(model_client, question)

    ranked = ranking(corpus, answer)
    assert answer["query_style"] == "regular"
    assert ranked[0] == answer_key, ranked
    assert "summary" in ranked, ranked
    assert ranked.index("summary") > ranked.index(answer_key)
    summary = answer["results"][ranked.index("summary")]["explanation"]["summary_downweight"]
    assert (summary["applied"], summary["multiplier"]) == (True, 0.5)


@pytest.mark.parametrize("question", [
    "Give me a recap of what we discussed about the trip",
    "Summarize our conversation about Lisbon",
    "What did we talk about regarding Alice's travel plans?",
])
async def test_a_summary_style_question_gets_the_summary_first(
    model_client: httpx.AsyncClient, corpus: Corpus, question: str,
) -> None:
    """The summary is the best or second-best vector match of each question; the facts it
    covers share a word or two with it, so it must not lose to them on full text alone."""
    answer = await search(model_client, question)

    ranked = ranking(corpus, answer)
    assert answer["query_style"] == "summary"
    assert ranked[0] == "summary", ranked
    first = answer["results"][0]["explanation"]["summary_downweight"]
    assert (first["is_summary"], first["applied"]) == (True, False)
    assert first["multiplier"] >= 1.0
    assert first["score"] >= first["score_before"]


# --- meaning without shared words ------------------------------------------------------------


@pytest.mark.parametrize(("question", "answer_key", "shares_a_word"), [
    ("What does Alice do for a living?", "nurse", True),  # only "Alice"
    ("Which musical instrument is Alice good at?", "cello", True),  # only "Alice"
    ("Who has a dog?", "beagle", False),
    ("What food should never be served to her?", "peanuts", False),
])
async def test_a_paraphrase_finds_the_fact_through_the_vector_list(
    model_client: httpx.AsyncClient, corpus: Corpus, question: str, answer_key: str,
    shares_a_word: bool,
) -> None:
    answer = await search(model_client, question, top_k=3)

    ranked = ranking(corpus, answer)
    assert answer_key in ranked, ranked
    fusion = answer["results"][ranked.index(answer_key)]["explanation"]["fusion"]
    assert fusion["vector_rank"] is not None, fusion
    assert fusion["vector_rank"] <= 3, fusion
    if not shares_a_word:
        assert fusion["text_rank"] is None, fusion


# --- the relevance floor: nothing related, nothing returned ----------------------------------


@pytest.mark.parametrize("question", [
    "What is the boiling point of tungsten?",
    "Explain the Krebs cycle in detail",
    "kubernetes pod eviction threshold",
])
async def test_a_question_about_nothing_stored_gets_an_empty_list(
    model_client: httpx.AsyncClient, unfloored_client: httpx.AsyncClient, question: str,
) -> None:
    answer = await search(model_client, question)

    assert answer == {"results": [], "query_style": "regular"}
    # Without the floor the same question answers with the least unrelated rows, none
    # sharing a word with it.
    nearest = (await search(unfloored_client, question))["results"]
    assert nearest
    assert all(r["explanation"]["fusion"]["text_rank"] is None for r in nearest)
    assert max(r["explanation"]["fusion"]["vector_similarity"] for r in nearest) < 0.25


@pytest.mark.parametrize("question", [
    "What is the boiling point of tungsten in 2026?",
    "What is 5 times 7?",
    "Can you tell me what January usually brings?",
])
async def test_a_year_day_or_month_word_ties_a_question_to_no_row(
    model_client: httpx.AsyncClient, unfloored_client: httpx.AsyncClient, question: str,
) -> None:
    """Each row's day (5 January 2026) is indexed as words, so these matched every row of
    the day and passed the floor as text matches, sharing no word of content with them."""
    nearest = (await search(unfloored_client, question))["results"]
    assert any(r["explanation"]["fusion"]["text_rank"] is not None for r in nearest)

    assert (await search(model_client, question))["results"] == []


async def test_a_bare_summary_request_gets_the_scope_s_summaries(
    model_client: httpx.AsyncClient, corpus: Corpus,
) -> None:
    """"recap" ties to no row by its words or its vector: the floor dropped every row,
    the summary with them, and a recap answered nothing."""
    for request in ("recap", "tl;dr", "summarize"):
        answer = await search(model_client, request, user_id="alice")
        assert answer["query_style"] == "summary"
        assert ranking(corpus, answer) == ["summary"], request
        floor = answer["results"][0]["explanation"]["relevance_floor"]
        assert floor["kept_by"] == "summary_request"
        # A scope without a summary still answers nothing.
        assert (await search(model_client, request, user_id="bob"))["results"] == []


async def test_the_floor_keeps_related_rows_and_says_why(
    model_client: httpx.AsyncClient, corpus: Corpus,
) -> None:
    answer = await search(model_client, "Who has a dog?")

    ranked = ranking(corpus, answer)
    assert ranked[0] == "beagle", ranked
    assert len(ranked) < len(ALICE_FACTS) + len(BOB_FACTS) + 1
    for r in answer["results"]:
        floor = r["explanation"]["relevance_floor"]
        assert floor["min_similarity"] == 0.25
        if floor["kept_by"] == "similarity":
            assert r["explanation"]["fusion"]["vector_similarity"] >= 0.25
        else:
            assert r["explanation"]["fusion"]["text_rank"] is not None


async def test_explain_gives_a_text_only_row_the_similarity_computed_for_it(
    model_resources: Resources,
) -> None:
    """A text-list row past the vector list's farthest row has no vector place, and explain
    still shows the similarity the statement computed for it (it showed null: an
    exploratory probe)."""
    tenant = await create_tenant_key(model_resources)
    async with make_client(model_resources, tenant.headers) as client:
        resp = await client.post("/v1/memories/batch", json={"items": [
            *({"content": f"diary entry number {i}"} for i in range(25)),
            {"content": "Alice keeps bees on the roof"}]})
        assert resp.status_code == 201, resp.text
        bees_id = resp.json()["items"][-1]["id"]
        answer = await search(client, "my diary entries and the bees", top_k=10)

    fusions = {r["memory"]["id"]: r["explanation"]["fusion"] for r in answer["results"]}
    bees = fusions[bees_id]
    assert bees["vector_rank"] is None
    assert bees["text_rank"] is not None
    placed = [f["vector_similarity"] for f in fusions.values() if f["vector_rank"] is not None]
    assert len(answer["results"]) == 10
    assert len(placed) == 9
    assert isinstance(bees["vector_similarity"], float)
    assert bees["vector_similarity"] < min(placed)
    assert bees["vector_term"] == 0.0


# --- a question asked again ----------------------------------------------------------------


class RefusingEmbedder:
    """Of the model's vector space, and never embeds: a cache miss fails the test."""

    def __init__(self, vector_space: str) -> None:
        self.vector_space = vector_space

    async def embed_query(self, text: str) -> list[float]:
        raise AssertionError(f"{text!r} was embedded again")


async def test_a_question_asked_again_is_answered_from_the_model_s_remembered_vector(
    model_client: httpx.AsyncClient, model_resources: Resources, corpus: Corpus,
) -> None:
    question = "Which hotel did Alice book for her stay?"
    hits = sample("engram_search_query_vectors_total", outcome="hit")
    misses = sample("engram_search_query_vectors_total", outcome="miss")

    first = await search(model_client, question)
    again = await search(model_client, question)

    assert ranking(corpus, first)[0] == "hotel", ranking(corpus, first)
    assert ranking(corpus, again) == ranking(corpus, first)
    # Equal but for the recency term, which moves with the clock.
    assert [r["score"] for r in again["results"]] == pytest.approx(
        [r["score"] for r in first["results"]], abs=1e-6)
    assert sample("engram_search_query_vectors_total", outcome="hit") == hits + 1
    assert sample("engram_search_query_vectors_total", outcome="miss") == misses + 1
    remembered = await model_resources.query_vectors.vector(
        RefusingEmbedder(model_resources.embedder.vector_space), corpus.tenant.tenant_id,
        question)
    fresh = await model_resources.embedder.embed_query(question)
    assert max(abs(a - b) for a, b in zip(remembered, fresh, strict=True)) < 1e-6


# --- scope filters never leak ----------------------------------------------------------------


@pytest.mark.parametrize(("user", "question"), [
    ("bob", "Give me a recap of what we discussed about the Lisbon trip"),
    ("bob", "Where is Alice staying in Lisbon?"),
    ("alice", "Who is training for the Berlin marathon?"),
    ("alice", "Who adopted a beagle named Pixel?"),
])
async def test_a_user_scope_never_returns_the_other_users_memories(
    unfloored_client: httpx.AsyncClient, model_client: httpx.AsyncClient, corpus: Corpus,
    user: str, question: str,
) -> None:
    """The best match of each question belongs to the other user."""
    answer = await search(unfloored_client, question, user_id=user, top_k=100)

    owners = {corpus.users[r["memory"]["id"]] for r in answer["results"]}
    assert owners == {user}
    expected = len(ALICE_FACTS) + 1 if user == "alice" else len(BOB_FACTS)
    assert len(answer["results"]) == expected

    unscoped = await search(model_client, question, top_k=1)
    assert corpus.users[unscoped["results"][0]["memory"]["id"]] != user




# --- a question that names a day ---------------------------------------------------------------

CAROL_VISITS = {
    "plumber": ("Carol said the plumber is coming to fix the kitchen sink", 10),
    "electrician": ("Carol said the electrician is coming to fix the kitchen lights", 12),
    "painter": ("Carol said the painter is coming to redo the kitchen walls", 14),
}


@pytest.mark.parametrize("day", ["12 February 2026", "February 12, 2026", "2026-02-12"])
async def test_a_question_that_names_a_day_gets_that_day_s_memory_first(
    model_client: httpx.AsyncClient, day: str,
) -> None:
    """Three memories alike but for their trade and the day they were written: the day the
    question names decides, and explain says which memory it matched."""
    ids = {}
    for key, (content, day_of_month) in CAROL_VISITS.items():
        resp = await model_client.post("/v1/memories", json={
            "content": content, "user_id": f"carol-{day}",
            "created_at": datetime(2026, 2, day_of_month, 18, tzinfo=UTC).isoformat()})
        assert resp.status_code == 201, resp.text
        ids[resp.json()["id"]] = key

    answer = await search(model_client, f"What did Carol say about the kitchen on {day}?",
                          user_id=f"carol-{day}")

    assert ids[answer["results"][0]["memory"]["id"]] == "electrician"
    assert {ids[r["memory"]["id"]]: r["explanation"]["date_match"]["matched"]
            for r in answer["results"]} == {"plumber": False, "electrician": True,
                                            "painter": False}


async def test_a_memory_about_the_named_day_still_beats_that_day_s_unrelated_ones(
    model_client: httpx.AsyncClient,
) -> None:
    """The day is a bonus, not a filter: the memory that answers the question, written
    weeks before the day it is about, stays above what was said that day about other
    things."""
    memories = [
        ("Dana's dentist appointment is on 8 May 2026 at nine in the morning", 4, 1),
        ("Dana bought new running shoes", 5, 8),
        ("Dana watered the tomato plants on the balcony", 5, 8),
        ("Dana called her sister who lives in Porto", 5, 8),
        ("Dana started reading a novel about a lighthouse keeper", 3, 2),
        ("Dana's car needs new winter tyres", 3, 9),
        ("Dana is learning to bake sourdough bread", 3, 15),
        ("Dana adopted a grey cat called Miso", 3, 21),
        ("Dana's team at work moved to a new office", 4, 12),
        ("Dana prefers aisle seats on trains", 4, 20),
    ]
    first = None
    for content, month, day in memories:
        resp = await model_client.post("/v1/memories", json={
            "content": content, "user_id": "dana",
            "created_at": datetime(2026, month, day, 18, tzinfo=UTC).isoformat()})
        assert resp.status_code == 201, resp.text
        first = first or resp.json()["id"]

    answer = await search(model_client, "Is Dana's dentist appointment on 8 May 2026?",
                          user_id="dana")

    assert answer["results"][0]["memory"]["id"] == first
    assert answer["results"][0]["explanation"]["date_match"]["matched"] is False
    # That day's memories follow it.
    assert [r["explanation"]["date_match"]["matched"] for r in answer["results"][1:4]] == [
        True, True, True]


# --- a question that names the day a summary covers ------------------------------------------

TRIP_SESSIONS = {
    "rome": (3, [
        "Erin and Sam compared flights to Rome for the spring holiday",
        "Erin and Sam chose a small hotel near the Pantheon",
        "Erin and Sam agreed to visit the Vatican museums on the first morning",
        "Erin and Sam decided to rent scooters in Rome",
    ]),
    "florence": (17, [
        "Erin and Sam compared trains from Rome to Florence",
        "Erin and Sam chose a guesthouse near the Duomo in Florence",
        "Erin and Sam agreed to book the Uffizi gallery tickets in advance",
        "Erin and Sam decided to take a cooking class in Florence",
    ]),
}


@pytest.mark.parametrize(("asked", "day"), [("rome", "3 March 2026"),
                                            ("florence", "17 March 2026")])
async def test_a_recap_of_a_named_day_gets_the_summary_of_that_day_written_later(
    model_client: httpx.AsyncClient, asked: str, day: str,
) -> None:
    """Two conversations of the same kind on two days, each consolidated today: the summary
    whose facts were said on the named day comes first, though both were written today."""
    user = f"erin-{asked}"
    summary_of = {}
    for session, (day_of_month, contents) in TRIP_SESSIONS.items():
        resp = await model_client.post("/v1/memories/batch", json={"items": [
            {"content": c, "user_id": user, "session_id": session,
             "created_at": datetime(2026, 3, day_of_month, 18, i, tzinfo=UTC).isoformat()}
            for i, c in enumerate(contents)]})
        assert resp.status_code == 201, resp.text
        run = await model_client.post("/v1/consolidations", json={
            "user_id": user, "session_id": session, "mode": "synthesize_only"})
        assert run.status_code == 200, run.text
        (group,) = run.json()["groups"]
        summary_of[group["summary_id"]] = session

    answer = await search(model_client, f"Give me a recap of what Erin and Sam discussed on {day}",
                          user_id=user)

    assert answer["query_style"] == "summary"
    top = answer["results"][0]
    assert summary_of.get(top["memory"]["id"]) == asked
    assert top["explanation"]["date_match"]["matched"] is True
    other = next(r for r in answer["results"]
                 if r["memory"]["id"] in summary_of and r is not top)
    assert other["explanation"]["date_match"]["matched"] is False


# Two conversations of the same two people, each summarised in words that do not name what
# it was about, as an LLM or a cut extractive summary may be.
TOPIC_SESSIONS = {
    "podcast": ([
        "Dana is launching a podcast about urban gardening next month",
        "Dana recorded the first two podcast episodes in her spare room",
        "Dana bought a new microphone for recording the podcast",
    ], "Dana and Lee caught up about their week, Lee's new job and plans for dinner."),
    "kitchen": ([
        "Dana and Lee are renovating their kitchen in April",
        "Dana chose dark green cabinets for the new kitchen",
        "Lee wants an induction hob in the renovated kitchen",
    ], "Dana and Lee talked about Dana's new project and what she has been recording."),
}


PODCAST_QUESTION = "Give me an overview of our chat about Dana's podcast"


async def topic_summaries(resources: Resources, tenant: TenantKey) -> dict[str, str]:
    """TOPIC_SESSIONS stored for user dana, each conversation's summary written: summary
    id -> topic."""
    summaries = {}
    async with make_client(resources, tenant.headers) as client:
        for topic, (facts, summary_text) in TOPIC_SESSIONS.items():
            resp = await client.post("/v1/memories/batch", json={"items": [
                {"content": c, "user_id": "dana", "session_id": topic} for c in facts]})
            assert resp.status_code == 201, resp.text
            sources = [m["id"] for m in resp.json()["items"]]
            summaries[await insert_summary(resources, tenant, summary_text, "dana",
                                           sources)] = topic
    return summaries


@pytest.mark.parametrize(("asked", "question"), [
    ("podcast", PODCAST_QUESTION),
    ("kitchen", "Recap what Dana and Lee discussed about the kitchen renovation"),
])
async def test_a_recap_of_a_topic_gets_the_summary_whose_sources_are_about_it(
    model_resources: Resources, asked: str, question: str,
) -> None:
    """The question's words and meaning are in the facts a summary covers, not in its text:
    the summary built from the facts the question found comes first, and says why."""
    tenant = await create_tenant_key(model_resources)
    summaries = await topic_summaries(model_resources, tenant)
    async with make_client(model_resources, tenant.headers) as client:
        answer = await search(client, question, user_id="dana")

    assert answer["query_style"] == "summary"
    ranked = [r for r in answer["results"] if r["memory"]["id"] in summaries]
    assert [summaries[r["memory"]["id"]] for r in ranked] == [asked, *(
        t for t in TOPIC_SESSIONS if t != asked)]
    assert answer["results"][0] is ranked[0]
    right, other = (r["explanation"]["summary_coverage"] for r in ranked)
    assert right["covered_candidates"] >= 2
    assert right["lift"] > other["lift"]


async def test_without_the_coverage_stage_a_summary_s_own_text_decides(
    model_resources: Resources,
) -> None:
    """The same podcast question with search_summary_coverage_weight 0: the kitchen
    conversation's summary, whose text speaks of a project and recording, comes first (what
    the test above shows the stage changes)."""
    tenant = await create_tenant_key(model_resources)
    summaries = await topic_summaries(model_resources, tenant)
    settings = model_resources.settings.model_copy(
        update={"search_summary_coverage_weight": 0.0})
    async with make_client(replace(model_resources, settings=settings),
                           tenant.headers) as client:
        answer = await search(client, PODCAST_QUESTION, user_id="dana")

    first = next(r for r in answer["results"] if r["memory"]["id"] in summaries)
    assert summaries[first["memory"]["id"]] == "kitchen"
    assert first["explanation"]["summary_coverage"]["lift"] == 0.0


# --- filters the listing also has: metadata and the creation window ---------------------------


async def test_metadata_and_a_creation_window_pick_the_answer_among_paraphrases(
    model_resources: Resources,
) -> None:
    """The same fact told three times, from three documents on three days: the paraphrase
    finds all of them, and each filter leaves exactly its own."""
    tenant = await create_tenant_key(model_resources)
    tellings = [
        ("Dana moved the team offsite to the lake house", "minutes-1", 1),
        ("The offsite will now be held at the lake house, Dana said", "email-7", 8),
        ("Dana relocated our offsite to the house by the lake", "minutes-2", 15),
    ]
    async with make_client(model_resources, tenant.headers) as client:
        created = []
        for content, doc, day in tellings:
            resp = await client.post("/v1/memories", json={
                "content": content, "metadata": {"doc": doc, "kind": doc.split("-")[0]},
                "created_at": datetime(2026, 3, day, tzinfo=UTC).isoformat()})
            assert resp.status_code == 201, resp.text
            created.append(resp.json()["id"])
        question = "Where is the team offsite taking place?"

        every = await search(client, question)
        assert {r["memory"]["id"] for r in every["results"]} == set(created)

        minutes = await search(client, question, metadata={"kind": "minutes"})
        assert {r["memory"]["id"] for r in minutes["results"]} == {created[0], created[2]}

        later = await search(client, question, created_after="2026-03-05T00:00:00Z")
        assert {r["memory"]["id"] for r in later["results"]} == {created[1], created[2]}

        both = await search(client, question, metadata={"kind": "minutes"},
                            created_before="2026-03-10T00:00:00+02:00")
        assert [r["memory"]["id"] for r in both["results"]] == [created[0]]

        none = await search(client, question, metadata={"doc": "email-7"},
                            created_before="2026-03-05T00:00:00Z")
        assert none["results"] == []


# --- a summary request and the relevance floor ---------------------------------------------

HEALTH_FACTS = ("The user takes ibuprofen for back pain.",
                "The user sees a physiotherapist on Tuesdays.",
                "The user is allergic to penicillin.",
                "The user had knee surgery in 2024.")
WORK_FACTS = ("The user works at a logistics startup.", "The user's manager is called Priya.",
              "The user wants a promotion next year.")


async def test_a_summary_request_gets_the_summary_of_the_facts_it_finds(
    model_resources: Resources,
) -> None:
    """Summaries as consolidation writes them (synthesize_only, one per category): "summarize
    what you know about my health" shares no word with the health summary, which sits under
    the floor, while one of the facts it covers passes. The floor keeps the summary of a row
    it keeps for a summary request, and the coverage stage then puts it first; without that
    the answer was one bare fact (an exploratory search probe)."""
    tenant = await create_tenant_key(model_resources)
    async with make_client(model_resources, tenant.headers) as client:
        for category, facts in (("health", HEALTH_FACTS), ("work", WORK_FACTS)):
            resp = await client.post("/v1/memories/batch", json={"items": [
                {"content": c, "user_id": "sam", "category": category} for c in facts]})
            assert resp.status_code == 201, resp.text
        run = await client.post("/v1/consolidations", json={
            "user_id": "sam", "mode": "synthesize_only"})
        assert run.status_code == 200, run.text
        summary_of = {g["category"]: g["summary_id"] for g in run.json()["groups"]}
        assert set(summary_of) == {"health", "work"}

        answer = await search(client, "summarize what you know about my health", user_id="sam")

    assert answer["query_style"] == "summary"
    first = answer["results"][0]
    assert first["memory"]["id"] == summary_of["health"]
    assert first["explanation"]["relevance_floor"]["kept_by"] == "source_kept"
    assert first["explanation"]["relevance_floor"]["min_similarity"] == \
        LOCAL_MODEL_MIN_SIMILARITY
    assert summary_of["work"] not in {r["memory"]["id"] for r in answer["results"]}


# --- a fact stated again -------------------------------------------------------------------

TEA = "Priya's favourite tea is jasmine."
TEA_AGAIN = ("Priya's favourite tea is jasmine.", "priya's favourite  tea is jasmine",
             "PRIYA'S FAVOURITE TEA IS JASMINE!")
OTHER_DRINKS = ("Priya drinks an espresso every morning.",
                "Priya does not drink alcohol at work dinners.",
                "Priya brought oolong tea back from Taipei.")


async def _tea_tenant(resources: Resources) -> tuple[TenantKey, list[str], list[str]]:
    """Priya's tea fact told in four sessions, each copy with its own case and punctuation,
    beside three other drinks of hers, and Omar's identical words: ids of (her tea copies,
    oldest first; the rest)."""
    tenant = await create_tenant_key(resources)
    copies, rest = [], []
    async with make_client(resources, tenant.headers) as client:
        for i, content in enumerate((TEA, *TEA_AGAIN)):
            resp = await client.post("/v1/memories", json={
                "content": content, "user_id": "priya", "session_id": f"s{i}",
                "created_at": datetime(2026, 3, 1 + i, tzinfo=UTC).isoformat()})
            assert resp.status_code == 201, resp.text
            copies.append(resp.json()["id"])
        for content, user in [*((c, "priya") for c in OTHER_DRINKS), (TEA, "omar")]:
            resp = await client.post("/v1/memories", json={"content": content, "user_id": user})
            assert resp.status_code == 201, resp.text
            rest.append(resp.json()["id"])
    return tenant, copies, rest


async def test_a_fact_stated_again_is_one_result_and_the_next_one_takes_the_place(
    model_resources: Resources,
) -> None:
    tenant, copies, (espresso, alcohol, oolong, omars) = await _tea_tenant(model_resources)
    async with make_client(model_resources, tenant.headers) as client:
        answer = await search(client, "What tea does Priya like?", user_id="priya", top_k=3)
        wide = await search(client, "What tea does Priya like?", top_k=10)

    # Without the stage the four copies were the first four results (the next test).
    kept, *others = (r["memory"]["id"] for r in answer["results"])
    assert kept in copies
    assert others == [espresso, oolong]
    collapsed = answer["results"][0]["explanation"]["collapse_duplicates"]
    assert collapsed["duplicates"] == 3
    assert set(collapsed["duplicate_ids"].split(",")) == set(copies) - {kept}
    # Across the tenant another user's identical words are their own result.
    wide_ids = [r["memory"]["id"] for r in wide["results"]]
    assert omars in wide_ids
    assert len(set(wide_ids) & set(copies)) == 1
    assert {espresso, alcohol, oolong} <= set(wide_ids)


async def test_with_collapsing_off_every_copy_is_answered(model_resources: Resources) -> None:
    tenant, copies, _ = await _tea_tenant(model_resources)
    settings = model_resources.settings.model_copy(
        update={"search_collapse_duplicates": False})
    async with make_client(replace(model_resources, settings=settings),
                           tenant.headers) as client:
        answer = await search(client, "What tea does Priya like?", user_id="priya", top_k=4)

    assert {r["memory"]["id"] for r in answer["results"]} == set(copies)
    assert "collapse_duplicates" not in answer["results"][0]["explanation"]


DARK_MODE = "The user prefers dark mode."
NIGHT_HABITS = ("Likes a black background in every app.",
                "Switches the editor to a night palette.",
                "Keeps the phone in night mode after sunset.",
                "Uses an OLED-friendly black wallpaper.",
                "Turns on the midnight skin in the browser.",
                "Wants low-light screens when coding late.",
                "Picked the charcoal look for the terminal.",
                "Finds bright white windows tiring on the eyes.",
                "Set the laptop to its dark appearance.",
                "Runs a dimmed layout on the tablet.",
                "Chose the black interface for the chat client.",
                "Hates glare from light backgrounds.")


async def test_copies_that_fill_the_vector_list_still_leave_top_k_distinct_results(
    model_resources: Resources,
) -> None:
    """A re-probe: 40 copies of a preference took the vector list's 20 places, and the
    paraphrases past them, sharing no word with the question, were never candidates: 9
    results for top_k 20, one of them the preference. The search retrieves deeper once."""
    tenant = await create_tenant_key(model_resources)
    async with make_client(model_resources, tenant.headers) as client:
        resp = await client.post("/v1/memories/batch", json={"items": [
            *({"content": DARK_MODE, "user_id": "u1", "session_id": f"s{i}"}
              for i in range(40)),
            *({"content": c, "user_id": "u1"} for c in NIGHT_HABITS)]})
        assert resp.status_code == 201, resp.text
        question = "Which display colour theme is preferred?"
        answer = await search(client, question, user_id="u1", top_k=5)

    every = replace(model_resources, settings=model_resources.settings.model_copy(
        update={"search_collapse_duplicates": False}))
    async with make_client(every, tenant.headers) as client:
        # Every copy answered, 52 deep: what the vector list reaches past the copies.
        whole = await search(client, question, user_id="u1", top_k=60)
        shallow = await search(client, question, user_id="u1", top_k=5)
    # The habits over the relevance floor (the others share neither a word nor enough of
    # the meaning).
    habits = {r["memory"]["content"] for r in whole["results"]} & set(NIGHT_HABITS)
    assert len(habits) >= 4
    # Without the collapse the first five are copies: the vector list held nothing else.
    assert {r["memory"]["content"] for r in shallow["results"]} == {DARK_MODE}

    contents = [r["memory"]["content"] for r in answer["results"]]
    assert len(contents) == 5
    assert contents.count(DARK_MODE) == 1
    assert set(contents) - {DARK_MODE} <= habits


async def test_a_query_naming_an_identifier_gets_the_row_holding_it_first(
    model_resources: Resources,
) -> None:
    """Found by an exploratory probe: among 40 look-alike invoices the model embeds the
    named one 14th; first in the text list alone it ranked 3rd, and tenant-wide 5th-7th.
    The text list now weighs more for a query naming an identifier."""
    tenant = await create_tenant_key(model_resources)
    numbers = random.Random(1).sample(range(100, 999), 40)
    named = "Invoice INV-2024-0042 for order #77777 was paid by bank transfer."
    async with make_client(model_resources, tenant.headers) as client:
        resp = await client.post("/v1/memories/batch", json={"items": [
            {"content": f"Invoice INV-2024-{n:04d} for order #{50000 + n} was paid by bank "
                        "transfer.", "user_id": "billing"} for n in numbers]})
        assert resp.status_code == 201, resp.text
        resp = await client.post("/v1/memories", json={"content": named,
                                                       "user_id": "billing"})
        assert resp.status_code == 201, resp.text
        target = resp.json()["id"]
        firsts = {}
        for query in ("INV-2024-0042", "invoice INV-2024-0042", "Was INV-2024-0042 paid?",
                      "what was order #77777"):
            for scope in ({"user_id": "billing"}, {}):
                answer = await search(client, query, top_k=5, explain=True, **scope)
                firsts[(query, bool(scope))] = answer["results"][0]["memory"]["id"]
                fusion = answer["results"][0]["explanation"]["fusion"]
                assert fusion["text_weight"] == model_resources.settings \
                    .search_identifier_text_weight
        plain = await search(client, "which invoices were paid by bank transfer",
                             user_id="billing", explain=True)

    assert set(firsts.values()) == {target}, firsts
    # A query naming none keeps the tuned weight.
    assert plain["results"][0]["explanation"]["fusion"]["text_weight"] == \
        model_resources.settings.search_text_weight
