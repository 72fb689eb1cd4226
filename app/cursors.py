"""Opaque keyset cursors for newest-first paging: (created_at, key) of the last row served,
the key a row's uuid (memories, runs, events) or its text id (sessions), and a digest of
the listing it pages (its endpoint and filters), so that a cursor given to another
listing is refused rather than answered with a page of it from an unrelated place (an
exploratory probe: a runs' cursor on the memories' listing served 32 of 33 memories, and
one user's cursor on another user's listing served nothing)."""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from app.errors import ValidationFailed
from app.validation import storable_text

Row = TypeVar("Row")

# The numbered rows (history versions, session turns) are int4 in the database.
_INT4_MAX = 2**31 - 1


# A cursor's longest: a session's id of 255 four-byte characters, base64 of its UTF-8.
CURSOR_MAX_CHARS = 2048


def listing(*parts: object) -> str:
    """The digest a cursor carries of the listing it pages: an endpoint's name, the tenant
    and what narrows it (a filter dataclass, a memory's or session's id), read as the
    listing reads them: a list's order and repeats, an object's key order and 1 against
    1.0 do not make another listing (a re-probe: `tags=a&tags=b` then `tags=b&tags=a`
    was refused)."""
    canonical = json.dumps(_canonical(parts), sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(canonical.encode(), digest_size=6).hexdigest()


def _canonical(value: object) -> object:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        # Every list a listing filters by matches as a set: tags (all), categories (any),
        # a metadata array (containment).
        return sorted({json.dumps(_canonical(v), sort_keys=True) for v in value})
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, enum.Enum):
        return _canonical(value.value)
    if isinstance(value, datetime | uuid.UUID):
        return str(value)
    return value


def encode_cursor(created_at: datetime, key: uuid.UUID | str, of: str) -> str:
    # Unescaped: a session's id of non-ASCII letters took 6 characters each, and a page
    # of sessions named by 85 of them could not be followed (past the parameter's bound).
    raw = json.dumps([created_at.isoformat(), str(key), of], separators=(",", ":"),
                     ensure_ascii=False)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _invalid() -> ValidationFailed:
    return ValidationFailed.on("query.cursor", "is not a cursor this service issued")


def decode_text_cursor(cursor: str, of: str) -> tuple[datetime, str]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        parts = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(parts, list) or len(parts) not in (2, 3):
            raise ValueError("not a cursor's parts")
        created_raw, key, *issued_for = parts
        created_at = datetime.fromisoformat(created_raw)
        if created_at.tzinfo is None or not isinstance(key, str) or not all(
                isinstance(part, str) for part in issued_for):
            raise ValueError("naive timestamp, no key or no listing")
        # The key goes to PostgreSQL as text, which cannot hold these.
        found = created_at.astimezone(UTC), storable_text(key)
    except (ValueError, TypeError, OverflowError, UnicodeDecodeError) as exc:
        raise _invalid() from exc
    # A cursor of two parts was issued before cursors named their listing: it pages on as
    # it did, so a client paging across the upgrade is not cut off.
    if issued_for and issued_for != [of]:
        raise ValidationFailed.on(
            "query.cursor", "is another listing's: a cursor pages only the listing it came "
            "from (the same path and filters); start again without it")
    return found


def decode_cursor(cursor: str, of: str) -> tuple[datetime, uuid.UUID]:
    created_at, key = decode_text_cursor(cursor, of)
    try:
        return created_at, uuid.UUID(key)
    except ValueError as exc:
        raise _invalid() from exc


def decode_number_cursor(cursor: str, of: str) -> int:
    """The row number (history version, turn seq) a numbered page's cursor stands at; the
    time it carries is unused."""
    _, key = decode_text_cursor(cursor, of)
    # isdigit would take "²" and other Unicode digits, which int() refuses.
    if not (key.isascii() and key.isdigit()) or int(key) > _INT4_MAX:
        raise _invalid()
    return int(key)


def cut_page(rows: Sequence[Row], limit: int,
             position: Callable[[Row], tuple[datetime, uuid.UUID | str]], of: str,
             ) -> tuple[Sequence[Row], str | None]:
    """Rows read `limit + 1` deep: the page, and the cursor of the next one (None when
    this is the last) for the listing `of`. `position` gives a row's (created_at, key)."""
    if len(rows) <= limit:
        return rows, None
    page = rows[:limit]
    return page, encode_cursor(*position(page[-1]), of)
