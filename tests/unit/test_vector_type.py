"""The embedding column's bind (a list of floats in one format step, anything else as
pgvector binds it) and its reading back (always a list of floats)."""

from __future__ import annotations

import random

import numpy as np
from pgvector import HalfVector
from sqlalchemy.dialects.postgresql import asyncpg

from app.models.vector import Embedding, vector_text
from app.settings import EMBEDDING_DIMENSIONS


def bind(value: object) -> str | None:
    return Embedding(EMBEDDING_DIMENSIONS).bind_processor(asyncpg.dialect())(value)


def test_a_list_of_floats_is_sent_in_halfvecs_text_form_to_six_decimals() -> None:
    rng = random.Random(7)
    vector = [rng.uniform(-0.3, 0.3) for _ in range(EMBEDDING_DIMENSIONS)]
    vector[0], vector[1] = -1.0, 1e-9

    sent = bind(vector)

    assert sent == vector_text(vector)
    assert sent is not None
    assert sent.startswith("[-1.000000,0.000000,")
    parsed = [float(x) for x in sent.strip("[]").split(",")]
    assert len(parsed) == EMBEDDING_DIMENSIONS
    # Well within half precision (about three significant digits).
    assert max(abs(a - b) for a, b in zip(parsed, vector, strict=True)) <= 5e-7


def test_other_values_are_bound_as_pgvector_binds_them() -> None:
    array = np.linspace(-1, 1, EMBEDDING_DIMENSIONS, dtype=np.float32)
    short = [0.5, 0.25]

    assert bind(None) is None
    assert bind(array) == HalfVector._to_db(array)
    assert bind(short) == HalfVector._to_db(short)


def test_a_stored_vector_reads_back_as_a_list_of_floats_whatever_the_driver_hands_over() -> None:
    read = Embedding(EMBEDDING_DIMENSIONS).result_processor(asyncpg.dialect(), None)

    # The text form asyncpg returns for halfvec, a HalfVector (pgvector 0.3's processor and
    # its binary codec), and a sequence.
    assert read("[0.5,-0.25,1]") == [0.5, -0.25, 1.0]
    assert read(HalfVector([0.5, -0.25, 1.0])) == [0.5, -0.25, 1.0]
    assert read(np.array([0.5, -0.25], dtype=np.float16)) == [0.5, -0.25]
    assert read(None) is None
    assert all(type(x) is float for x in read("[0.5,-0.25,1]"))
