"""The seconds an upstream's Retry-After asks to wait, as both provider clients read it."""

from __future__ import annotations

import math

import httpx


def retry_after_seconds(response: httpx.Response) -> float | None:
    """The header's seconds; None when absent, an HTTP date (the backoff is good enough),
    negative, or not finite (`inf` would wait for ever)."""
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
