"""The embedding column's type, and the text form a vector is sent to PostgreSQL in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pgvector import HalfVector
from pgvector.sqlalchemy import HALFVEC
from sqlalchemy.engine import Dialect

from app.settings import EMBEDDING_DIMENSIONS

# halfvec's text form; one % is ~3x cheaper than pgvector's float-by-float str() (50 against
# 164 us a vector), which for a batch of 500 memories ran on the event loop for ~80 ms.
# Six decimals keep more than a half-precision float holds.
VECTOR_TEXT = "[" + ",".join(["%.6f"] * EMBEDDING_DIMENSIONS) + "]"


def vector_text(vector: Sequence[float]) -> str:
    return VECTOR_TEXT % tuple(vector)


class Embedding(HALFVEC):
    """pgvector's HALFVEC, binding a list of EMBEDDING_DIMENSIONS floats through VECTOR_TEXT,
    and read back as a list of floats whatever pgvector's version (0.3 returned a
    HalfVector, 0.4 and later a list)."""

    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], str | None]:
        fallback = super().bind_processor(dialect)

        def process(value: Any) -> str | None:
            if isinstance(value, list) and len(value) == EMBEDDING_DIMENSIONS:
                return VECTOR_TEXT % tuple(value)
            if isinstance(value, str):
                return value  # already in its text form (MemoryRepository.insert_many)
            result: str | None = fallback(value)
            return result

        return process

    def result_processor(self, dialect: Dialect, coltype: Any) -> Callable[[Any], Any]:
        def process(value: Any) -> list[float] | None:
            if value is None:
                return None
            if isinstance(value, str):
                return [float(v) for v in value[1:-1].split(",")]
            if isinstance(value, HalfVector):
                return value.to_list()
            return [float(v) for v in value]

        return process
