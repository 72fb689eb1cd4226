"""The statement bound's two sides: the server's statement_timeout and the client's
later command_timeout."""

from __future__ import annotations

import pytest

from app import db_timeout


@pytest.mark.parametrize(("seconds", "setting"), [
    (30, "30000"), (0.5, "500"), (2.5, "2500"),
    # Below a millisecond still bounds (PostgreSQL reads 0 as no bound).
    (0.0001, "1"),
    (0, "0"),
])
def test_the_servers_setting_is_in_milliseconds_and_zero_is_no_bound(
    seconds: float, setting: str,
) -> None:
    assert db_timeout.server_settings(seconds) == {"statement_timeout": setting}


@pytest.mark.parametrize(("seconds", "client"), [
    # As long again for short bounds, 5 s more for long ones.
    (0.5, 1.0), (3, 6.0), (5, 10.0), (30, 35.0), (3600, 3605.0),
    (0, None),
])
def test_the_client_waits_past_the_server(seconds: float, client: float | None) -> None:
    assert db_timeout.client_timeout(seconds) == client
