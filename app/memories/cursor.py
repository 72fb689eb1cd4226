"""Opaque keyset cursors for newest-first paging: (created_at, id) of the last row served."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime

from app.errors import ValidationFailed


def encode_cursor(created_at: datetime, memory_id: uuid.UUID) -> str:
    raw = json.dumps([created_at.isoformat(), str(memory_id)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        created_raw, id_raw = json.loads(base64.urlsafe_b64decode(padded.encode()))
        created_at = datetime.fromisoformat(created_raw)
        if created_at.tzinfo is None:
            raise ValueError("naive timestamp")
        return created_at.astimezone(UTC), uuid.UUID(id_raw)
    except (ValueError, TypeError, OverflowError, UnicodeDecodeError) as exc:
        raise ValidationFailed.on("query.cursor", "is not a cursor this service issued") from exc
