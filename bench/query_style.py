"""How long the query-style classifier and the date parser take on the longest queries a
search accepts (4,096 characters), built to make regular expressions backtrack: runs of
each word the rules name, alone and in random mixes, against a few ordinary questions.

Both run on the event loop for every search (app/search/stages/query_style.py,
query_dates.py), so their worst case is a stall of every request. Until 2026-12-01 a run
of "now" took 105 s (an exploratory probe). Prints milliseconds; no database, no model.

Run: .venv/bin/python bench/query_style.py [--mixes N]
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.search.stages import query_style  # noqa: E402
from app.search.stages.query_dates import query_dates  # noqa: E402

LIMIT = 4096
ORDINARY = ["what did Alice say about the lessons on 8 May 2023?",
            "hey, could you please give me a quick recap of our chat about the Berlin move",
            "does the user do any sports?"]


def vocabulary() -> list[str]:
    """Every word of the classifier's module (so every word its rules spell out), and a few
    signs they split clauses at."""
    source = Path(query_style.__file__).read_text()
    words = {w for w in re.findall(r"[a-z]+(?:'[a-z]+)?", source) if len(w) > 1}
    return [*sorted(words), "'s", "tl;dr", "8", "may", "2023", "-", ",", "?", "."]


def ms(fn: Callable[[str], object], text: str) -> float:
    started = time.perf_counter()
    fn(text)
    return (time.perf_counter() - started) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--mixes", type=int, default=2000, help="random word mixes")
    args = parser.parse_args()
    words = vocabulary()
    rng = random.Random(20261201)
    families: dict[str, list[str]] = {
        "ordinary questions": ORDINARY,
        "a run of one word": [((w + " ") * LIMIT)[:LIMIT - 1] + "x" for w in words],
        "random mixes of 1-8 words": [
            " ".join(rng.choice(pool) for _ in range(LIMIT))[:LIMIT]
            for pool in (rng.sample(words, rng.choice([1, 2, 3, 5, 8]))
                         for _ in range(args.mixes))],
    }
    print(f"{len(words)} words; each text up to {LIMIT} characters; ms per call")
    print("| inputs | n | classifier p50 | classifier max | date parser p50 | date parser max |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, texts in families.items():
        style = [ms(query_style.classify_query_style, t) for t in texts]
        dates = [ms(query_dates, t) for t in texts]
        print(f"| {name} | {len(texts)} | {statistics.median(style):.2f} | {max(style):.2f} "
              f"| {statistics.median(dates):.2f} | {max(dates):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
