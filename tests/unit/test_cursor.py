"""Opaque list cursors: what we issue decodes to the same position; anything else is a 422
that names `cursor`."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.cursors import (
    decode_cursor,
    decode_number_cursor,
    decode_text_cursor,
    encode_cursor,
    listing,
)
from app.errors import ValidationFailed


@pytest.mark.parametrize(
    "created_at",
    [
        datetime(2026, 1, 31, 12, 0, tzinfo=UTC),
        datetime(2026, 1, 31, 12, 0, 0, 123456, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-5))),
    ],
)
def test_round_trip(created_at: datetime) -> None:
    memory_id = uuid.uuid4()

    cursor = encode_cursor(created_at, memory_id, OF)

    assert decode_cursor(cursor, OF) == (created_at, memory_id)
    # Opaque and safe in a query string: URL-safe base64 without padding.
    assert "=" not in cursor
    assert all(c.isalnum() or c in "-_" for c in cursor)


OF = listing("memories", "a filter")


def _b64(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "!!!not-base64!!!",
        "",
        _b64("not json"),
        _b64("null"),
        _b64("{}"),
        _b64('{"a": 1, "b": 2}'),
        _b64("[1, 2]"),
        _b64('["2026-01-31T12:00:00+00:00"]'),
        _b64('["2026-01-31T12:00:00+00:00", "not-a-uuid"]'),
        _b64(f'["not a date", "{uuid.uuid4()}"]'),
        # A naive timestamp would compare wrongly against timestamptz.
        _b64(f'["2026-01-31T12:00:00", "{uuid.uuid4()}"]'),
        _b64(f'["2026-01-31T12:00:00+00:00", "{uuid.uuid4()}", "extra"]'),
        _b64(f'["2026-01-31T12:00:00+00:00", "{uuid.uuid4()}", 7]'),
        _b64(f'["2026-01-31T12:00:00+00:00", "{uuid.uuid4()}", "{OF}", "more"]'),
        base64.urlsafe_b64encode(b"\xff\xfe\xfd").decode(),
        encode_cursor(datetime(2026, 1, 1, tzinfo=UTC), uuid.uuid4(), OF)[:-3],
    ],
)
def test_garbage_is_a_validation_error_naming_cursor(cursor: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        decode_cursor(cursor, OF)

    error = caught.value
    assert error.status == 422
    assert error.errors is not None
    # "cursor" or its dotted location ("query.cursor"), as the API's errors name fields.
    assert [e.field.rsplit(".", 1)[-1] for e in error.errors] == ["cursor"]
    assert "cursor" in error.detail


def test_cursor_payload_is_json_of_timestamp_id_and_listing() -> None:
    created_at = datetime(2026, 5, 1, 8, 30, tzinfo=UTC)
    memory_id = uuid.UUID("01890000-0000-7000-8000-000000000001")

    cursor = encode_cursor(created_at, memory_id, OF)
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))

    assert json.loads(raw) == [created_at.isoformat(), str(memory_id), OF]


def test_a_cursor_of_another_listing_is_refused_naming_it() -> None:
    """A runs' cursor on the memories' listing had served a page of memories, and one
    user's on another user's an empty page (an exploratory probe)."""
    at, key = datetime(2026, 5, 1, tzinfo=UTC), uuid.uuid4()
    for other in (listing("runs", "a filter"), listing("memories", "another filter")):
        with pytest.raises(ValidationFailed) as caught:
            decode_cursor(encode_cursor(at, key, other), OF)
        assert caught.value.errors is not None
        assert [e.field for e in caught.value.errors] == ["query.cursor"]
        assert "another listing" in caught.value.errors[0].message


def test_a_cursor_issued_before_cursors_named_their_listing_pages_on() -> None:
    at, key = datetime(2026, 5, 1, tzinfo=UTC), uuid.uuid4()
    legacy = _b64(json.dumps([at.isoformat(), str(key)]))
    assert decode_cursor(legacy, OF) == (at, key)


def _keyed(key: str) -> str:
    return _b64(json.dumps(["2026-01-31T12:00:00+00:00", key]))


@pytest.mark.parametrize("key", ["\u0000", "a\u0000b", "\ud800"],
                         ids=["nul", "nul-inside", "lone-surrogate"])
def test_a_text_key_postgresql_cannot_hold_is_refused(key: str) -> None:
    # It would reach the database as text and fail there (a 500) instead.
    with pytest.raises(ValidationFailed) as caught:
        decode_text_cursor(_keyed(key), OF)
    assert caught.value.status == 422


@pytest.mark.parametrize("key", ["2147483647", "0", "1"])
def test_a_number_cursor_gives_its_int4_number(key: str) -> None:
    assert decode_number_cursor(_keyed(key), OF) == int(key)


@pytest.mark.parametrize(
    "key", ["\u00b2", "\u0661", "2147483648", "9" * 20, "-1", " 5", "5 ", "", "1.0"],
    ids=["superscript-two", "arabic-indic-one", "int4-max-plus-one", "20-digits", "negative",
         "leading-space", "trailing-space", "empty", "decimal"])
def test_a_number_cursor_outside_int4_digits_is_refused(key: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        decode_number_cursor(_keyed(key), OF)
    assert caught.value.status == 422
    assert caught.value.errors is not None
    assert [e.field for e in caught.value.errors] == ["query.cursor"]


def test_a_listing_is_its_filters_as_the_listing_reads_them() -> None:
    """A re-probe: tags in another order, an object's keys in another order, 1 for 1.0 had
    made another listing, and a legitimate next page was refused."""
    tenant = uuid.uuid4()
    same = [
        ("memories", tenant, {"tags": ["a", "b"], "metadata": {"x": 1, "y": [1, 2]}}),
        ("memories", tenant, {"metadata": {"y": [2, 1, 2], "x": 1.0}, "tags": ["b", "a", "b"]}),
    ]
    assert listing(*same[0]) == listing(*same[1])
    assert listing("memories", uuid.uuid4(), same[0][2]) != listing(*same[0])
    assert listing("memories", tenant, {"tags": ["a"]}) != listing(*same[0])
    assert listing("runs", tenant, same[0][2]) != listing(*same[0])
