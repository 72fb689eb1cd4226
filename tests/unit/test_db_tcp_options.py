"""The database connections' TCP options, as a timeout sets them."""

from __future__ import annotations

import socket

from app.db_tcp import socket_options

TCP = socket.IPPROTO_TCP


def test_zero_leaves_the_os_defaults() -> None:
    assert socket_options(0) == []


def test_a_timeout_sets_keepalive_and_the_user_timeout() -> None:
    assert socket_options(30) == [
        (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
        (TCP, socket.TCP_KEEPIDLE, 10),
        (TCP, socket.TCP_KEEPINTVL, 5),
        (TCP, socket.TCP_KEEPCNT, 3),
        (TCP, socket.TCP_USER_TIMEOUT, 30_000),
    ]


def test_a_short_timeout_probes_every_second() -> None:
    options = {option: value for _, option, value in socket_options(1)}

    assert options[socket.TCP_KEEPIDLE] == 1
    assert options[socket.TCP_KEEPINTVL] == 1
    assert options[socket.TCP_USER_TIMEOUT] == 1_000
