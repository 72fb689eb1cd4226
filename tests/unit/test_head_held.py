"""An answer's head held until its body's first write (app/service/head_held.py)."""

from __future__ import annotations

from app.service.head_held import HeadHeldTransport

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"


class Recorded:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def test_the_head_leaves_with_the_body_in_one_write() -> None:
    sent = Recorded()
    transport = HeadHeldTransport(sent)
    transport.write(HEAD)
    assert sent.writes == []
    transport.write(b"{}")
    assert sent.writes == [HEAD + b"{}"]
    transport.write(b"more")  # later pieces as they come
    assert sent.writes == [HEAD + b"{}", b"more"]


def test_a_continue_goes_at_once_the_client_waits_for_it() -> None:
    sent = Recorded()
    HeadHeldTransport(sent).write(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert sent.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]


def test_a_head_no_body_follows_leaves_at_the_answers_end_or_the_close() -> None:
    sent = Recorded()
    transport = HeadHeldTransport(sent)
    transport.write(HEAD)
    transport.flush()  # the protocol, when the answer completes (a HEAD's)
    transport.flush()
    assert sent.writes == [HEAD]

    closing = Recorded()
    transport = HeadHeldTransport(closing)
    transport.write(HEAD)
    transport.close()
    assert (closing.writes, closing.closed) == ([HEAD], True)
    assert transport.is_closing()


def test_whole_answers_and_bodies_pass_as_they_are() -> None:
    sent = Recorded()
    transport = HeadHeldTransport(sent)
    whole = b"HTTP/1.1 431 Request Header Fields Too Large\r\n\r\n{\"status\": 431}"
    transport.write(whole)
    transport.write(b"5\r\nchunk\r\n")
    assert sent.writes == [whole, b"5\r\nchunk\r\n"]


def test_a_head_held_when_the_client_has_gone_is_dropped() -> None:
    gone = Recorded()
    transport = HeadHeldTransport(gone)
    transport.write(HEAD)
    gone.closed = True  # the connection was lost under the answer
    transport.flush()
    assert gone.writes == []


def test_a_write_after_the_client_went_is_dropped() -> None:
    """Found by a probe: two pipelined requests, then the client closed. uvicorn marked
    only the second one gone; the first wrote on, uvloop's transport raised, and each
    time two ERROR tracebacks were logged. The transport here raises as uvloop's does."""

    class Uvloop(Recorded):
        def write(self, data: bytes) -> None:
            if self.closed:
                raise RuntimeError("unable to perform operation on <TCPTransport closed=True>")
            super().write(data)

    sent = Uvloop()
    transport = HeadHeldTransport(sent)
    transport.write(HEAD)
    sent.close()
    transport.write(b"{}")
    transport.flush()
    assert sent.writes == []
