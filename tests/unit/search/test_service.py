"""SearchService's order of work: the full-text statement runs while the query is embedded,
and a failure of either leaves nothing running."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from app.errors import ProviderError
from app.memories.repository import ANSWER_KEYS
from app.search.config import build_pipeline
from app.search.pipeline import PipelineConfig, SearchPipeline
from app.search.repository import (
    RetrievalLimits,
    RetrievedRow,
    SearchFilter,
    TextMatches,
)
from app.search.schemas import SearchRequest
from app.search.service import SearchService
from app.settings import Settings
from tests.unit.search.builders import NOW

DIM = 4


def row(n: int, *, vector_rank: int | None, text_rank: int | None) -> RetrievedRow:
    memory_id = uuid.UUID(int=n)
    record: dict[str, Any] = {
        "id": memory_id, "content": f"memory {n}", "user_id": "u", "agent_id": None,
        "session_id": None, "namespace": None, "category": "general", "tags": [],
        "importance": 0.5, "metadata": {}, "source": "api", "fact_role": "fact",
        "summary_of": [], "created_at": NOW, "updated_at": NOW, "expires_at": None,
        "archived_at": None, "consolidation_id": None,
    }
    return RetrievedRow(
        memory_id=memory_id, importance=0.5, created_at=NOW, fact_role="fact",
        columns=tuple(record[key] for key in ANSWER_KEYS),
        vector_rank=vector_rank, vector_similarity=None if vector_rank is None else 0.9,
        text_rank=text_rank, text_score=None if text_rank is None else 2.0,
    )


class Repository:
    """Records the calls; `text_gate` holds the text statement until it is set."""

    def __init__(self, *, text_error: BaseException | None = None) -> None:
        self.text_started = asyncio.Event()
        self.text_gate = asyncio.Event()
        self.text_cancelled = False
        self.text_error = text_error
        self.candidates_calls: list[tuple[TextMatches, list[float]]] = []
        self.filters: list[SearchFilter] = []
        self.matches = TextMatches(small=True, ids=(uuid.UUID(int=2),), scores=(2.0,))

    async def text_matches(self, query_text: str, filters: SearchFilter,
                           limits: RetrievalLimits) -> TextMatches:
        self.filters.append(filters)
        self.text_started.set()
        try:
            await self.text_gate.wait()
        except asyncio.CancelledError:
            self.text_cancelled = True
            raise
        if self.text_error is not None:
            raise self.text_error
        return self.matches

    async def candidates(self, text: TextMatches, query_vector: Sequence[float],
                         filters: SearchFilter, limits: RetrievalLimits,
                         top_k: int = 0) -> list[RetrievedRow]:
        self.candidates_calls.append((text, list(query_vector)))
        self.filters.append(filters)
        return [row(1, vector_rank=1, text_rank=None), row(2, vector_rank=2, text_rank=1)]


class Embedder:
    """Embeds only once the text statement has started, then lets it finish: a service
    that embedded first and queried after would wait here forever."""

    name = "fake"
    dimensions = DIM

    def __init__(self, repository: Repository, error: BaseException | None = None) -> None:
        self.repository = repository
        self.error = error

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        await asyncio.wait_for(self.repository.text_started.wait(), timeout=2)
        if self.error is not None:
            raise self.error
        self.repository.text_gate.set()
        return [[1.0, 0.0, 0.0, 0.0] for _ in texts]

    async def embed_query(self, text: str) -> list[float]:
        (vector,) = await self.embed([text])
        return vector

    async def aclose(self) -> None:
        pass


def service(repository: Repository, embedder: Embedder) -> SearchService:
    return SearchService(repository=repository, embedder=embedder,
                         pipeline=SearchPipeline.from_config(PipelineConfig()),
                         limits=RetrievalLimits())


async def test_the_text_statement_runs_while_the_query_is_embedded() -> None:
    repository = Repository()

    answer = await service(repository, Embedder(repository)).search(
        SearchRequest(query="what does Alice like", top_k=5))

    [(text, vector)] = repository.candidates_calls
    assert text == repository.matches
    assert vector == [1.0, 0.0, 0.0, 0.0]
    # Memory 2 is in both lists, memory 1 only in the vector list.
    assert [r.memory.id for r in answer.results] == [uuid.UUID(int=2), uuid.UUID(int=1)]


async def test_a_failed_embedding_cancels_the_text_statement() -> None:
    repository = Repository()
    failure = ProviderError("the embeddings endpoint answered 500")

    with pytest.raises(ProviderError):
        await service(repository, Embedder(repository, error=failure)).search(
            SearchRequest(query="what does Alice like"))

    assert repository.text_cancelled
    assert repository.candidates_calls == []


async def test_a_failed_text_statement_fails_the_search_after_the_embedding() -> None:
    repository = Repository(text_error=ConnectionRefusedError("database down"))

    with pytest.raises(ConnectionRefusedError):
        await service(repository, Embedder(repository)).search(
            SearchRequest(query="what does Alice like"))

    assert repository.candidates_calls == []


async def test_every_filter_of_the_request_reaches_both_statements() -> None:
    repository = Repository()
    after, before = NOW - timedelta(days=7), NOW
    request = SearchRequest.model_validate({
        "query": "offsite", "user_id": "u", "agent_id": "a", "session_id": "s",
        "namespace": "n", "tags": ["t"], "categories": ["c"], "include_summaries": False,
        "created_after": after.isoformat(), "created_before": before.isoformat(),
        "metadata": {"doc": "d1", "page": {"n": 2}}})

    await service(repository, Embedder(repository)).search(request)

    expected = SearchFilter(user_id="u", agent_id="a", session_id="s", namespace="n",
                            tags=["t"], categories=["c"], include_summaries=False,
                            created_after=after, created_before=before,
                            metadata={"doc": "d1", "page": {"n": 2}})
    assert repository.filters == [expected, expected]
    assert expected.narrows()
    assert expected.uncounted()


@pytest.mark.parametrize(("fields", "uncounted"), [
    ({}, False),
    ({"metadata": {}}, False),  # an empty object filters nothing
    ({"metadata": {"doc": "d1"}}, True),
    ({"created_after": "2026-01-01T00:00:00Z"}, True),
    ({"created_before": "2026-01-01T00:00:00Z"}, True),
])
async def test_a_filter_term_stats_does_not_count_makes_the_scope_counted(
    fields: dict[str, Any], uncounted: bool,
) -> None:
    """term_stats counts a tenant's, a user's, a tag's and a category's rows, not a window's
    or a metadata value's: with one, the scope's size is counted on its rows."""
    repository = Repository()

    await service(repository, Embedder(repository)).search(
        SearchRequest.model_validate({"query": "offsite", **fields}))

    [filters, _] = repository.filters
    assert filters.metadata is None or filters.metadata
    assert (filters.uncounted(), filters.narrows()) == (uncounted, uncounted)


class CopiesFirst(Repository):
    """A vector list of `copies` copies of one memory at the first depth; deeper, the
    distinct memories past them too."""

    def __init__(self, copies: int, distinct: int) -> None:
        super().__init__()
        self.text_gate.set()
        self.copies, self.distinct = copies, distinct
        self.depths: list[int] = []

    async def candidates(self, text: TextMatches, query_vector: Sequence[float],
                         filters: SearchFilter, limits: RetrievalLimits,
                         top_k: int = 0) -> list[RetrievedRow]:
        self.depths.append(top_k)
        depth = max(top_k, limits.vector_candidates)
        rows = [copy_row(n) for n in range(1, self.copies + 1)]
        rows += [row(1000 + n, vector_rank=self.copies + n, text_rank=None)
                 for n in range(1, self.distinct + 1)]
        return rows[:depth]


def copy_row(n: int) -> RetrievedRow:
    copy = row(n, vector_rank=n, text_rank=None)
    columns = dict(zip(ANSWER_KEYS, copy.columns, strict=True))
    columns["content"] = "The user prefers dark mode."
    return copy._replace(columns=tuple(columns[key] for key in ANSWER_KEYS))


def collapsing(repository: Repository) -> SearchService:
    return SearchService(repository=repository, embedder=Embedder(repository),
                         pipeline=build_pipeline(Settings(embedder="hash")),
                         limits=RetrievalLimits(vector_candidates=20, hnsw_candidates=20))


async def test_copies_filling_the_vector_list_make_the_search_retrieve_deeper_once() -> None:
    repository = CopiesFirst(copies=20, distinct=30)
    answer = await collapsing(repository).search(SearchRequest(query="theme?", top_k=10))
    assert repository.depths == [10, 100]
    ids = [r.memory.id.int for r in answer.results]
    assert len(ids) == 10
    assert sum(i <= 20 for i in ids) == 1


@pytest.mark.parametrize(("copies", "distinct", "top_k"), [
    (5, 30, 10),  # the answer filled at the first depth
    (12, 3, 10),  # the vector list came back short of its depth: the scope holds no more
    (0, 30, 10),  # nothing collapsed
])
async def test_no_deeper_retrieval_when_it_cannot_add_a_result(
    copies: int, distinct: int, top_k: int,
) -> None:
    repository = CopiesFirst(copies=copies, distinct=distinct)
    await collapsing(repository).search(SearchRequest(query="theme?", top_k=top_k))
    assert repository.depths == [top_k]
