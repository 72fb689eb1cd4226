"""A request head with its upgrade offer left out: the HTTP/1.1 request the offer came
with, which a server that does not take the upgrade serves as such (RFC 9110 7.8)."""

from __future__ import annotations

from collections.abc import Sequence


def without_upgrade_offer(method: bytes, target: bytes, version: str,
                          headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    """The head, as bytes to parse again, without the Upgrade header and without the
    `upgrade` option of Connection (its other options, `close` among them, stay); the
    rest as it came, in order."""
    lines = [b"%s %s HTTP/%s\r\n" % (method, target, version.encode("ascii"))]
    for name, value in headers:
        if name.lower() == b"upgrade":
            continue
        if name.lower() == b"connection":
            options = [o.strip() for o in value.split(b",")]
            kept = [o for o in options if o and o.lower() != b"upgrade"]
            if not kept:
                continue
            value = b", ".join(kept)
        lines.append(b"%s: %s\r\n" % (name, value))
    lines.append(b"\r\n")
    return b"".join(lines)
