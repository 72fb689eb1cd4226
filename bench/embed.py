"""The local model's two runtimes side by side: one query's latency and batch throughput.

For each runtime of app/providers/sentence_encoder.py (ONNX Runtime, the service's
default, and sentence-transformers on torch, the reference) on one thread, as the
service runs it: p50/p95 of one query (--queries generated questions, 8-25 tokens)
and sentences/s in batches of 64 (the service's batch size) over --sentences generated
memories (~27 tokens), plus the largest difference between the two runtimes' vectors
over all those texts. Runtimes alternate round by round, so a change of load on the
shared machine hits both alike.

Run: .venv/bin/python bench/embed.py            (~1 minute)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
for p in (str(ROOT), str(BENCH)):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import ingest as ing  # noqa: E402  (the sentence generator)
import search  # noqa: E402  (the question generator)

from app.providers.sentence_encoder import SentenceEncoder, load_encoder  # noqa: E402

RUNTIMES = ("onnx", "torch")
BATCH = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--sentences", type=int, default=1280)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()

    questions = search.make_questions(11, args.queries)
    sentences = ing.make_sentences(12, args.sentences)
    encoders: dict[str, SentenceEncoder] = {}
    for runtime in RUNTIMES:
        t = time.perf_counter()
        encoders[runtime] = load_encoder(runtime, threads=1, batch_size=BATCH,
                                         cache_dir=ing.model_cache_dir())
        print(f"{runtime}: loaded in {time.perf_counter() - t:.1f} s", flush=True)
        encoders[runtime].encode(questions[:20])

    single: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    batch_s: dict[str, float] = dict.fromkeys(RUNTIMES, 0.0)
    q_round = len(questions) // args.rounds
    s_round = len(sentences) // args.rounds
    for rnd in range(args.rounds):
        for runtime, encoder in encoders.items():
            for q in questions[rnd * q_round:(rnd + 1) * q_round]:
                t = time.perf_counter()
                encoder.encode([q])
                single[runtime].append((time.perf_counter() - t) * 1000)
            chunk = sentences[rnd * s_round:(rnd + 1) * s_round]
            t = time.perf_counter()
            for i in range(0, len(chunk), BATCH):
                encoder.encode(chunk[i:i + BATCH])
            batch_s[runtime] += time.perf_counter() - t

    texts = questions + sentences
    difference = float(np.abs(encoders["onnx"].encode(texts)
                              - encoders["torch"].encode(texts)).max())
    print(f"\nload average {os.getloadavg()[0]:.2f}; one thread each")
    print("| runtime | 1 query p50 ms | 1 query p95 ms | batches of 64, sentences/s |")
    print("| --- | --- | --- | --- |")
    for runtime in RUNTIMES:
        xs = single[runtime]
        print(f"| {runtime} | {ing.pct(xs, 50):.2f} | {ing.pct(xs, 95):.2f} | "
              f"{s_round * args.rounds / batch_s[runtime]:.0f} |")
    print(f"largest difference between the runtimes' vectors over {len(texts)} texts: "
          f"{difference:.1e}")


if __name__ == "__main__":
    main()
