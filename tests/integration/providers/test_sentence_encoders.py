"""The two runtimes of the local model compute the same vectors, and the ONNX export is
made once, kept in the cache folder and reused; a folder it cannot write costs only the
next start."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pytest

from app.providers import onnx_encoder
from app.providers.embedder import build_embedder
from app.providers.local_embedder import LocalEmbedder
from app.providers.sentence_encoder import DIMENSIONS, SentenceEncoder, load_encoder, model_dir
from app.settings import Settings

pytestmark = pytest.mark.model

WORDS = ("the", "cat", "sat", "on", "a", "mat", "Alice", "Bob", "lunch", "project", "Orion",
         "meeting", "Tuesday", "12", "percent", "allergic", "peanuts", "dentist", "Zürich",
         "東京", "café", "naïve", "—", "2026-03-14", "e-mail")


def texts(seed: int, n: int) -> list[str]:
    """Lengths from empty to past the model's 256-token truncation."""
    rng = random.Random(seed)
    return ["", "word " * 400, *(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 350))) for _ in range(n))]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def onnx(cache_dir: Path) -> SentenceEncoder:
    return load_encoder("onnx", threads=1, batch_size=16, cache_dir=cache_dir)


@pytest.fixture(scope="module")
def torch_encoder(cache_dir: Path) -> SentenceEncoder:
    return load_encoder("torch", threads=1, batch_size=16, cache_dir=cache_dir)


@pytest.fixture
def no_export(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Fails the test if anything exports again."""
    calls: list[Path] = []

    def refuse(directory: Path, threads: int) -> bytes:
        calls.append(directory)
        raise AssertionError("exported although the cache holds the model")

    monkeypatch.setattr(onnx_encoder, "export", refuse)
    return calls


def test_onnx_matches_sentence_transformers_in_batches_and_alone(
    onnx: SentenceEncoder, torch_encoder: SentenceEncoder,
) -> None:
    sample = texts(7, 60)

    expected = torch_encoder.encode(sample)
    batched = onnx.encode(sample)
    alone = np.vstack([onnx.encode([t]) for t in sample])

    assert batched.shape == (len(sample), DIMENSIONS)
    assert batched.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    # Far below what a halfvec column keeps (~1e-3).
    assert float(np.abs(batched - expected).max()) < 1e-5
    assert float(np.abs(alone - expected).max()) < 1e-5


def test_the_export_is_cached_under_its_key_and_reused(
    onnx: SentenceEncoder, cache_dir: Path, no_export: list[Path],
) -> None:
    (cached,) = cache_dir.iterdir()
    assert cached.name == onnx_encoder.cache_key(model_dir())
    assert cached.stat().st_size > 10_000_000

    again = load_encoder("onnx", threads=1, batch_size=16, cache_dir=cache_dir)

    assert no_export == []
    sample = texts(3, 5)
    assert float(np.abs(again.encode(sample) - onnx.encode(sample)).max()) == 0.0
    assert [p.name for p in cache_dir.iterdir()] == [cached.name]


def test_the_key_changes_with_the_export_code(monkeypatch: pytest.MonkeyPatch) -> None:
    before = onnx_encoder.cache_key(model_dir())
    monkeypatch.setattr(onnx_encoder, "EXPORT_VERSION", onnx_encoder.EXPORT_VERSION + 1)

    assert onnx_encoder.cache_key(model_dir()) != before


def test_an_unwritable_cache_folder_still_serves(
    onnx: SentenceEncoder, cache_dir: Path, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="engram.embedder")
    (cached,) = cache_dir.iterdir()
    graph = cached.read_bytes()
    monkeypatch.setattr(onnx_encoder, "export", lambda directory, threads: graph)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")

    encoder = load_encoder("onnx", threads=1, batch_size=16, cache_dir=blocker / "models")

    assert "could not cache the ONNX model" in caplog.text
    # Not a path it never wrote (a disk-full probe).
    (exported,) = [r.getMessage() for r in caplog.records if "exported" in r.getMessage()]
    assert exported.endswith("(kept in memory only)")
    sample = texts(5, 4)
    assert float(np.abs(encoder.encode(sample) - onnx.encode(sample)).max()) == 0.0
    assert blocker.read_text() == "not a folder"


def test_a_damaged_cached_file_is_exported_again(
    onnx: SentenceEncoder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture, cache_dir: Path,
) -> None:
    (cached,) = cache_dir.iterdir()
    graph = cached.read_bytes()
    exports: list[Path] = []

    def export(directory: Path, threads: int) -> bytes:
        exports.append(directory)
        return graph

    monkeypatch.setattr(onnx_encoder, "export", export)
    damaged = tmp_path / cached.name
    damaged.write_bytes(graph[: len(graph) // 3])

    encoder = load_encoder("onnx", threads=1, batch_size=16, cache_dir=tmp_path)

    assert "cannot be loaded" in caplog.text
    assert len(exports) == 1
    assert damaged.read_bytes() == graph
    sample = texts(9, 4)
    assert float(np.abs(encoder.encode(sample) - onnx.encode(sample)).max()) == 0.0


def test_a_failed_export_says_how_to_run_on_torch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(directory: Path, threads: int) -> bytes:
        raise ModuleNotFoundError("No module named 'onnx'")

    monkeypatch.setattr(onnx_encoder, "export", broken)

    with pytest.raises(RuntimeError, match="ENGRAM_EMBEDDER_RUNTIME=torch"):
        load_encoder("onnx", threads=1, batch_size=16, cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


async def test_the_service_embedder_uses_the_settings_runtime_and_cache(
    cache_dir: Path, onnx: SentenceEncoder, no_export: list[Path],
) -> None:
    settings = Settings(embedder="local", model_cache_dir=cache_dir,
                        _env_file=None)  # type: ignore[call-arg]
    embedder = build_embedder(settings)
    assert isinstance(embedder, LocalEmbedder)
    try:
        (vector,) = await embedder.embed(["Alice is allergic to peanuts."])
    finally:
        await embedder.aclose()

    assert no_export == []
    expected = onnx.encode(["Alice is allergic to peanuts."])[0]
    assert max(abs(a - b) for a, b in zip(vector, expected.tolist(), strict=True)) == 0.0
