"""The answers the HTTP protocol gives before a request reaches the app (a head too
large, a request that is not HTTP/1.1): problem+json with a request id of their own in
the header and the body, as every answer and problem carries one and the OpenAPI
document declares; the request's own id is in the head that could not be read. With a
`Date`, which RFC 9110 6.6.1 asks of every 4xx answer, as the app's have."""

from __future__ import annotations

import json
import os
from email.utils import formatdate

PROBLEMS = "https://engram.dev/problems/"


def problem_answer(status: int, reason: str, code: str, title: str, detail: str) -> bytes:
    """A whole answer, closing the connection."""
    request_id = os.urandom(16).hex()
    body = json.dumps({"type": PROBLEMS + code, "title": title, "status": status,
                       "detail": detail, "request_id": request_id}).encode()
    return (b"HTTP/1.1 %d %s\r\ndate: %s\r\ncontent-type: application/problem+json\r\n"
            b"content-length: %d\r\nconnection: close\r\nx-request-id: %s\r\n\r\n%s"
            % (status, reason.encode(), formatdate(usegmt=True).encode(), len(body),
               request_id.encode(), body))
