"""How both provider clients read the wait an upstream asks for."""

from __future__ import annotations

import time
from email.utils import formatdate

import httpx
import pytest

from app.providers.retry_after import retry_after_seconds


def wait(**headers: str) -> float | None:
    return retry_after_seconds(httpx.Response(429, headers=headers))


def test_seconds_and_openais_milliseconds_are_read() -> None:
    assert wait() is None
    assert wait(**{"retry-after": "3"}) == 3.0
    # OpenAI sends retry-after-ms beside (or without) Retry-After: it is the finer one.
    assert wait(**{"retry-after-ms": "1500", "retry-after": "2"}) == 1.5
    assert wait(**{"retry-after-ms": "soon", "retry-after": "2"}) == 2.0


def test_an_http_date_is_the_wait_until_it() -> None:
    later = wait(**{"retry-after": formatdate(time.time() + 30, usegmt=True)})
    assert later is not None
    assert 28 <= later <= 30
    assert wait(**{"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # past


@pytest.mark.parametrize("value", ["garbage", "inf", "nan", "-1", "Wed, 21 Oct 2015 07:28:00",
                                   # a zone past any offset: OverflowError, a 500 (re-probe)
                                   "Mon, 01 Jan 2030 00:00:00 +99999999999999999999"])
def test_what_cannot_be_read_as_a_wait_is_none(value: str) -> None:
    assert wait(**{"retry-after": value}) is None
