"""Reusable field types: text PostgreSQL can store, bounded JSON, zone-aware datetimes."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    GetJsonSchemaHandler,
    Strict,
    StringConstraints,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from app.unicode_forms import composed

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

METADATA_MAX_BYTES = 16384
METADATA_MAX_DEPTH = 32
RESERVED_METADATA_KEYS = frozenset({"summary_of", "fact_role"})


def is_storable(value: str) -> bool:
    """PostgreSQL text cannot hold NUL, and UTF-8 cannot encode a lone surrogate."""
    return _UNSTORABLE.search(value) is None


def storable_text(value: str) -> str:
    if not is_storable(value):
        raise ValueError("must not contain NUL characters or unpaired surrogates")
    return value


# jsonb keeps a number exactly and writes it back without an exponent: 1e308 came back
# as 309 digits (a 16 KB object of them read back as 620 KB, and could not be PATCHed
# back as read), as an integer to a client's JSON parser.
METADATA_NUMBER_MAX_CHARS = 40


def _check_number(value: float | int) -> None:
    if isinstance(value, int):
        # An integer of 4,000 digits was taken (JavaScript reads it as Infinity).
        written = str(value)
    elif not math.isfinite(value):
        return  # refused with the size check's clearer words
    else:
        written = format(Decimal(repr(value)), "f")
    if len(written) > METADATA_NUMBER_MAX_CHARS:
        raise ValueError(f"numbers must take at most {METADATA_NUMBER_MAX_CHARS} characters "
                         f"written out without an exponent (PostgreSQL keeps {value!r} as "
                         "every one of its digits)")


def _too_large(size: int | None = None) -> ValueError:
    got = f" (got {size})" if size is not None else ""
    return ValueError(f"must serialise to at most {METADATA_MAX_BYTES} bytes{got}")


def _check_json_values(value: Any) -> None:
    """Every value jsonb can hold and a client can read back as sent. At most half as many
    values as metadata's bytes are looked at: each takes two at least (with its
    separator), so one more is over the size anyway, which a list of 3 million numbers
    took 10 s of the event loop to learn (an exploratory probe)."""
    budget = METADATA_MAX_BYTES // 2 + 1
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise _too_large()
        if depth > METADATA_MAX_DEPTH:
            raise ValueError(f"must nest at most {METADATA_MAX_DEPTH} levels deep")
        if isinstance(item, float | int) and not isinstance(item, bool):
            _check_number(item)
        elif isinstance(item, str):
            storable_text(item)
        elif isinstance(item, dict | list):
            if len(item) > budget:
                raise _too_large()
            if isinstance(item, dict):
                for key, inner in item.items():
                    storable_text(key)
                    stack.append((inner, depth + 1))
            else:
                stack.extend((inner, depth + 1) for inner in item)


def client_metadata(value: dict[str, Any]) -> dict[str, Any]:
    reserved = sorted(RESERVED_METADATA_KEYS & value.keys())
    if reserved:
        raise ValueError(f"reserved keys cannot be set by clients: {', '.join(reserved)}")
    return bounded_json(value)


def bounded_json(value: dict[str, Any]) -> dict[str, Any]:
    """A JSON object jsonb can hold, within metadata's size and depth."""
    _check_json_values(value)
    try:
        # Compact, as a client measures its own JSON: Python's default separators added
        # a space after every comma and colon (1,500 keys of 15,001 bytes read as 18,000).
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False,
                             separators=(",", ":"))
    except ValueError:
        # Python's parser accepts NaN and Infinity; JSON (and jsonb) do not.
        raise ValueError("numbers must be finite (no NaN or Infinity)") from None
    size = len(encoded.encode())
    if size > METADATA_MAX_BYTES:
        raise _too_large(size)
    if "e+" in encoded:
        # A float from 1e16 up is a whole number, which Python writes with an exponent and
        # jsonb without: the create answer said 1e+16 where every read says
        # 10000000000000000, a float to a client's parser there and an integer here (an
        # exploratory probe). Kept as the integer, both say what a read says.
        return dict(json.loads(encoded, parse_float=_whole_if_exponent))
    return value


def _whole_if_exponent(literal: str) -> float | int:
    value = float(literal)
    return int(value) if "e+" in literal else value


def zone_aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("must carry a time zone (RFC 3339, e.g. 2026-01-31T12:00:00Z)")
    # Stored and answered in UTC, so the create answer equals every later read.
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is outside the representable range once converted to UTC") from None
    # asyncpg writes these two instants as PostgreSQL's -infinity and infinity, which are
    # not dates: a memory created at -infinity has no day to index, and would come back
    # as another value than it was sent.
    if utc.replace(tzinfo=None) in (datetime.min, datetime.max):
        raise ValueError("must lie after 0001-01-01T00:00:00Z and before "
                         "9999-12-31T23:59:59.999999Z")
    return utc


_NUMERIC = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)\s*")


_DATE_ONLY = re.compile(r"\s*\d{4}-\d{2}-\d{2}\s*")
# A '+' of an offset sent unencoded in a query string arrives as a blank.
_PLUS_AS_BLANK = re.compile(r".*[Tt ]\d{2}:\d{2}(:\d{2}([.,]\d+)?)? \d{2}(:?\d{2})?")
# RFC 3339 allows second 60 (a leap second); Python's datetime does not hold it. Whole:
# date, hour and minute, 60, a fraction, an offset (a looser pattern took "23:59:600Z").
_LEAP_SECOND = re.compile(
    r"(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:)60(?:[.,]\d+)?([Zz]|[+-]\d{2}:?\d{2})")
_EXAMPLE = "(RFC 3339, e.g. 2026-01-31T12:00:00Z)"


def _rfc3339_only(value: Any) -> Any:
    # pydantic reads a number, or a string of digits, as seconds since 1970: a client that
    # sent `"expires_at": 3600` meaning "in an hour" would store a memory that expired in
    # 1970 and vanishes at once. The API's date-times are RFC 3339 strings only.
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or _NUMERIC.fullmatch(value):
        raise PydanticCustomError(
            "datetime_type",
            "Input should be an RFC 3339 date-time string (e.g. 2026-01-31T12:00:00Z)")
    if _DATE_ONLY.fullmatch(value):
        raise PydanticCustomError(
            "datetime_type", f"Input is a date alone: give a date-time with a time zone "
            f"{_EXAMPLE}")
    if _PLUS_AS_BLANK.fullmatch(value):
        raise PydanticCustomError(
            "datetime_type", "Input has a blank where its offset's sign belongs: a '+' in "
            "a URL's query string must be sent as %2B")
    leap = _LEAP_SECOND.fullmatch(value)
    if leap:
        return _before_leap_second(leap)
    return value


def _before_leap_second(leap: re.Match[str]) -> str:
    """The last instant datetime holds before the leap second, so a time written at one
    orders as it should among every other (an upper bound at it is rounded up past it,
    `_rounded_up`). A leap second falls at the last minute of a UTC day only."""
    head, offset = leap.group(1), leap.group(2)
    try:
        minute = datetime.fromisoformat(f"{head}59{offset.upper()}").astimezone(UTC)
    except ValueError:
        return leap.group(0)  # pydantic's own refusal says what is wrong
    if (minute.hour, minute.minute) != (23, 59):
        raise PydanticCustomError(
            "datetime_parsing", "Input has second 60, a leap second, outside the last "
            "minute of a UTC day (23:59:60Z)")
    return f"{head}59.999999{offset}"


# Digits past the microsecond, which pydantic drops (datetime holds no finer).
_SUB_MICROSECOND = re.compile(r"[.,]\d{6}(\d+)")


def _rounded_up(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """An exclusive upper bound (`created_at < bound`) rounded up to the microsecond, not
    down: `created_before=...00.1234567Z` truncated to .123456 left out a memory
    created at .123456, before the bound the client sent (.NET and Java clocks write
    seven digits and more). A leap second too: taken as 23:59:59.999999, a bound at it
    left out a memory of that instant. A lower bound truncates correctly, as it is."""
    parsed = handler(value)
    if isinstance(value, str) and isinstance(parsed, datetime):
        extra = _SUB_MICROSECOND.search(value)
        if (extra and extra.group(1).strip("0")) or _LEAP_SECOND.fullmatch(value):
            try:
                return parsed + timedelta(microseconds=1)
            except OverflowError:
                return parsed
    return parsed


def _json_integer(value: Any) -> Any:
    # bool is an int to Python, and lax mode reads "5" as 5: a body that sent a flag or
    # a string where a count belongs is a client's mistake, not a number. An integral
    # float (5.0) is still an integer, as JSON Schema's "integer" says.
    if isinstance(value, bool | str):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


def _json_number(value: Any) -> Any:
    if isinstance(value, bool | str):
        raise PydanticCustomError("float_type", "Input should be a valid number")
    return value


def dedupe(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))


# Unicode's White_Space characters: those pydantic's strip_whitespace strips from
# content, tags and categories (Rust's trim), spelt out so that JSON Schema's `pattern`
# states the same rule to every regex engine (ECMA in a generated client, Python, Rust in
# pydantic-core read \uXXXX alike). The pattern had named ASCII white space only, so a
# generated client let through content of an ideographic space the service refused (an
# exploratory probe).
_WHITE_SPACE = r"\t-\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_NOT_BLANK_PATTERN = f"[^{_WHITE_SPACE}]"
# Scope ids, which are kept as sent (not stripped), are blank only of ASCII white space:
# narrowing that would strand the memories, sessions and runs already stored under an id
# of a no-break or an ideographic space alone, which no read, filter or delete could then
# name (a re-probe).
_ASCII_WHITE_SPACE = r" \t\n\r\f\v"
_ASCII_BLANK = re.compile(f"[{_ASCII_WHITE_SPACE}]*")
_NOT_ASCII_BLANK_PATTERN = f"[^{_ASCII_WHITE_SPACE}]"


def not_blank(value: str) -> str:
    # Scope ids are kept as sent (" alice" and "alice" are two users, as a client may
    # mean), but one of only white space is a client's bug: an empty template variable
    # that would file memories under a user no one can name.
    if _ASCII_BLANK.fullmatch(value):
        raise ValueError("must not be blank (white space only)")
    return value


def not_empty(value: str) -> str:
    # After stripping: pydantic's own min_length said "String should have at least 1
    # character" of a string of three spaces.
    if not value:
        raise ValueError("must not be blank (white space only)")
    return value


@dataclass(frozen=True)
class _DeclaredPattern:
    """States a rule in the JSON Schema as a pattern; the check itself stays a
    validator's (`not_blank`, `path_segment`; stripping and min_length for content, tags
    and categories), for plainer messages than a pattern's."""

    pattern: str

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler,
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["pattern"] = self.pattern
        return json_schema


_DECLARED_NOT_BLANK = _DeclaredPattern(_NOT_BLANK_PATTERN)
_DECLARED_NOT_ASCII_BLANK = _DeclaredPattern(_NOT_ASCII_BLANK_PATTERN)


Text = Annotated[str, AfterValidator(storable_text)]
Content = Annotated[
    str,
    StringConstraints(strip_whitespace=True, max_length=32768),
    AfterValidator(not_empty), AfterValidator(storable_text), _DECLARED_NOT_BLANK,
]
# Blank is declared so, as for content: declared as minLength 1 alone, "   " was valid by
# the document and a 422 from the service (an exploratory probe).
QueryText = Annotated[
    str,
    StringConstraints(strip_whitespace=True, max_length=4096),
    AfterValidator(not_empty), AfterValidator(storable_text), _DECLARED_NOT_BLANK,
]


ScopeId = Annotated[str, StringConstraints(min_length=1, max_length=255),
                    AfterValidator(storable_text), AfterValidator(not_blank),
                    _DECLARED_NOT_ASCII_BLANK]


def path_segment(value: str) -> str:
    # '/' would end the segment, and clients resolve '.' and '..' away before sending
    # (RFC 3986, 5.2.4): a session so named was made only by a raw request, and no
    # client could name it again.
    if "/" in value or value in (".", ".."):
        raise ValueError("must not contain '/' nor be '.' or '..' (no URL could name it)")
    return value


PATH_SEGMENT_PATTERN = r"^(?!\.{1,2}$)[^/]*[^ \t\n\r\f\v/][^/]*$"


# A scope id that is also a URL path segment (a session's, in its endpoints' paths).
PathScopeId = Annotated[ScopeId, AfterValidator(path_segment),
                        _DeclaredPattern(PATH_SEGMENT_PATTERN)]


LABEL_MAX_CHARS = 100


def label_form(value: str) -> str:
    """A tag or category composed (NFC), on write and in a filter alike: "café" with a
    combining accent had been another tag than "café", so a filter, a delete by tag or
    a summary's shared tags missed it (an exploratory probe). Composing can lengthen a
    text (a few Indic letters come apart): one it would take past the limit is kept as
    sent, as migration 0033 keeps those stored, so it still fits its column, and its
    filter still finds it (a re-probe: refused, such labels stored before were beyond
    reach)."""
    form = composed(value)
    return form if len(form) <= LABEL_MAX_CHARS else value


# Blank once stripped is refused: declared, as for scope ids, so a client knows.
Category = Annotated[str, StringConstraints(strip_whitespace=True, max_length=LABEL_MAX_CHARS),
                     AfterValidator(not_empty), AfterValidator(storable_text),
                     AfterValidator(label_form), _DECLARED_NOT_BLANK]
Tag = Annotated[str, StringConstraints(strip_whitespace=True, max_length=LABEL_MAX_CHARS),
                AfterValidator(not_empty), AfterValidator(storable_text),
                AfterValidator(label_form), _DECLARED_NOT_BLANK]
TagList = Annotated[list[Tag], Field(max_length=64), AfterValidator(dedupe)]
# An empty list filters nothing, as in search and the listing (a generated client sends
# [] for a field left unset).
CategoryList = Annotated[list[Category], Field(max_length=64)]
# The limits are enforced by `client_metadata`; JSON Schema cannot state a byte size or a
# depth, so the OpenAPI document says them in words for client authors.
Metadata = Annotated[
    dict[str, Any],
    Field(description=(
        f"Free-form JSON object: at most {METADATA_MAX_BYTES} bytes serialised as UTF-8 "
        f"JSON, nested at most {METADATA_MAX_DEPTH} levels, finite numbers of at most "
        f"{METADATA_NUMBER_MAX_CHARS} characters written without an exponent, no NUL "
        "characters or unpaired surrogates in keys or strings; the keys "
        + " and ".join(sorted(RESERVED_METADATA_KEYS)) + " are reserved for consolidation "
        "output.")),
    AfterValidator(client_metadata),
]
# A filter on metadata, matched by jsonb containment (`@>`): what a memory may hold, so
# its keys may be reserved ones (a summary's `summary_of`).
_MATCH_SEMANTICS = (
    "Only memories whose metadata contains this object: each key given holds the value "
    "given (a nested object matches by containment, an array when it holds every item "
    "given). An empty object matches every memory.")
MetadataMatch = Annotated[
    dict[str, Any],
    Field(description=(
        f"{_MATCH_SEMANTICS} At most {METADATA_MAX_BYTES} bytes serialised, nested at most "
        f"{METADATA_MAX_DEPTH} levels, as `metadata`.")),
    AfterValidator(bounded_json),
]
METADATA_PARAM_MAX_CHARS = 4096
METADATA_PARAM_DESCRIPTION = (
    'A JSON object, URL-encoded (`metadata={"project":"apollo"}`). ' + _MATCH_SEMANTICS)


def metadata_match_param(raw: str) -> dict[str, Any]:
    """The filter as a query string carries it: JSON text, parsed here (FastAPI takes no
    object type in a query string)."""
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"is not valid JSON: {exc}") from None
    except RecursionError:
        # Past the parser's depth (~1,000 levels in 2,200 characters): no metadata nests
        # so deep, and the error was a 500 (an exploratory probe).
        raise ValueError(f"must nest at most {METADATA_MAX_DEPTH} levels deep") from None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return bounded_json(value)


# Numbers and flags of request bodies, as JSON types: `true` is not 1, "5" is not 5, and
# "yes" or 1 is not a boolean (pydantic's lax mode would take each of them). Bounds go
# before the check (`Annotated[int, Field(ge=1), INTEGER_ONLY]`): put after it, pydantic
# cannot fold them into the number's schema and the OpenAPI document loses them.
INTEGER_ONLY = BeforeValidator(_json_integer)
NUMBER_ONLY = BeforeValidator(_json_number)
JsonBool = Annotated[bool, Strict()]
Importance = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False), NUMBER_ONLY]
AwareDatetime = Annotated[datetime, BeforeValidator(_rfc3339_only), AfterValidator(zone_aware)]
AwareDatetimeBefore = Annotated[AwareDatetime, WrapValidator(_rounded_up)]
Source = Annotated[str, StringConstraints(strip_whitespace=True, max_length=64),
                   AfterValidator(not_empty), AfterValidator(storable_text),
                   _DECLARED_NOT_BLANK]
