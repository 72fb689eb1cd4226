"""The seconds an upstream's Retry-After asks to wait, as both provider clients read it."""

from __future__ import annotations

import math
import time
from email.utils import parsedate_to_datetime

import httpx


def retry_after_seconds(response: httpx.Response) -> float | None:
    """The wait asked for: OpenAI's `retry-after-ms` (milliseconds) first, then
    `Retry-After` in seconds or as an HTTP date (a date past is no wait); None when
    absent, unreadable, negative or not finite (`inf` would wait for ever)."""
    millis = _finite(response.headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    value = response.headers.get("retry-after")
    if value is None:
        return None
    seconds = _finite(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):  # a zone of 20 digits
        return None
    if when.tzinfo is None:
        return None  # not the GMT date RFC 9110 asks for: no way to know the moment
    return max(0.0, when.timestamp() - time.time())


def _finite(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None
