"""Opaque keyset cursors for newest-first paging: (created_at, key) of the last row served,
the key a row's uuid (memories, runs, events) or its text id (sessions)."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from app.errors import ValidationFailed
from app.validation import storable_text

Row = TypeVar("Row")

# The numbered rows (history versions, session turns) are int4 in the database.
_INT4_MAX = 2**31 - 1


def encode_cursor(created_at: datetime, key: uuid.UUID | str) -> str:
    raw = json.dumps([created_at.isoformat(), str(key)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _invalid() -> ValidationFailed:
    return ValidationFailed.on("query.cursor", "is not a cursor this service issued")


def decode_text_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created_raw, key = json.loads(base64.urlsafe_b64decode(padded.encode()))
        created_at = datetime.fromisoformat(created_raw)
        if created_at.tzinfo is None or not isinstance(key, str):
            raise ValueError("naive timestamp or no key")
        # The key goes to PostgreSQL as text, which cannot hold these.
        return created_at.astimezone(UTC), storable_text(key)
    except (ValueError, TypeError, OverflowError, UnicodeDecodeError) as exc:
        raise _invalid() from exc


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    created_at, key = decode_text_cursor(cursor)
    try:
        return created_at, uuid.UUID(key)
    except ValueError as exc:
        raise _invalid() from exc


def decode_number_cursor(cursor: str) -> int:
    """The row number (history version, turn seq) a numbered page's cursor stands at; the
    time it carries is unused."""
    _, key = decode_text_cursor(cursor)
    # isdigit would take "²" and other Unicode digits, which int() refuses.
    if not (key.isascii() and key.isdigit()) or int(key) > _INT4_MAX:
        raise _invalid()
    return int(key)


def cut_page(rows: Sequence[Row], limit: int,
             position: Callable[[Row], tuple[datetime, uuid.UUID | str]],
             ) -> tuple[Sequence[Row], str | None]:
    """Rows read `limit + 1` deep: the page, and the cursor of the next one (None when
    this is the last). `position` gives a row's (created_at, key)."""
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    return page, encode_cursor(*position(page[-1]))
