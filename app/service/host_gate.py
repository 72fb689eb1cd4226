"""Which names the service answers to, and, with authentication off, which web pages.

With authentication off the service binds to a loopback address and trusts whoever can
reach it. A web page cannot reach it directly, but by DNS rebinding it can: its own name
re-pointed at 127.0.0.1 makes the service the page's own origin, free to read, change and
erase every memory (an HTTP probe did, with `Host: attacker.example`; Ollama's
CVE-2024-28224 is the same). So with authentication off a request must name a loopback
host (`localhost`, a `*.localhost` name, a loopback address) or one of
`ENGRAM_ALLOWED_HOSTS`; else it is 421. And a request a browser sends from a page of
another site (its `Origin`), which needs no rebinding for a form's POST, is 403. With
authentication on a key is needed, which a page cannot borrow, and names are checked only
where `ENGRAM_ALLOWED_HOSTS` lists them; loopback names are served whatever the list (the
image's HEALTHCHECK asks 127.0.0.1), and the probes and metrics (/healthz, /readyz,
/metrics, which an orchestrator asks by the pod's address) under any name.

Whatever the mode, an HTTP/1.1 request with no Host, or two, or one that is no host, is
400 (RFC 9112 3.2).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import AppError, app_error_response

ANY = "*"
PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
# A name or an address, and a port: RFC 9110 7.2's uri-host [ ":" port ], loosely.
_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:/@\[\]?#]+)(:[0-9]{0,5})?")


class BadHost(AppError):
    status, code, title = 400, "bad_request", "Bad request"


class MisdirectedRequest(AppError):
    status, code, title = 421, "host_not_allowed", "Misdirected request"


class CrossSiteRequest(AppError):
    status, code, title = 403, "cross_site_request", "Cross-site request"


@functools.lru_cache(maxsize=1024)  # a client's name repeats; parsing an address is ~4 us
def is_loopback_name(host: str) -> bool:
    """`host` (lower case, without its port) names this machine whatever DNS says."""
    if host == "localhost" or host.endswith(".localhost"):  # RFC 6761 6.3
        return True
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class HostRule:
    """The names a request may address, and whether a foreign page's request is refused."""

    allowed: frozenset[str]  # lower case, without ports; empty: loopback names only
    auth_off: bool  # loopback names only, and no foreign page's request
    check_names: bool

    @classmethod
    def of(cls, *, auth_enabled: bool, allowed_hosts: tuple[str, ...]) -> HostRule:
        allowed = frozenset(h.lower().rstrip(".") for h in allowed_hosts)
        return cls(allowed=allowed, auth_off=not auth_enabled,
                   check_names=not auth_enabled or bool(allowed))

    def admits(self, host: str) -> bool:
        """`*` admits any name, and any page's request with it."""
        return ANY in self.allowed or host in self.allowed or is_loopback_name(host)


def origin_host(origin: str) -> str:
    """An Origin's host as `host_name` gives a Host's ('' for `null` and the like)."""
    try:
        parts = urlsplit(origin)
        name = parts.hostname or ""
    except ValueError:
        return ""
    name = name.rstrip(".")
    return f"[{name}]" if ":" in name else name


@functools.lru_cache(maxsize=1024)
def host_name(value: str) -> str | None:
    """A Host field's name, lower case, without its port or a final dot; None if the value
    is no host."""
    found = _HOST.fullmatch(value.strip())
    if found is None:
        return None
    return found.group(1).lower().rstrip(".")


class HostGateMiddleware:
    def __init__(self, app: ASGIApp, rule: HostRule) -> None:
        self.app = app
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = self.refusal(scope)
            if refusal is not None:
                await app_error_response(refusal)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> AppError | None:
        hosts = [value for name, value in scope["headers"] if name == b"host"]
        origins = [value for name, value in scope["headers"] if name == b"origin"]
        if self.rule.auth_off and origins:
            origin = origins[0].decode("latin-1")
            if not self.rule.admits(origin_host(origin)):
                return CrossSiteRequest(
                    f"with authentication off the service takes no request from a web "
                    f"page of another site (Origin {origin!r}): any site could otherwise "
                    "change its memories; turn authentication on, or list the page's host "
                    "in ENGRAM_ALLOWED_HOSTS")
        if len(hosts) > 1:
            return BadHost("the request has more than one Host header")
        if not hosts:
            if scope.get("http_version") == "1.0":
                return None  # HTTP/1.0 needs none, and no browser sends one without it
            return BadHost("an HTTP/1.1 request must have a Host header")
        name = host_name(hosts[0].decode("latin-1"))
        if name is None:
            return BadHost(f"the Host header {hosts[0].decode('latin-1')!r} is not a host")
        probe = not self.rule.auth_off and scope["path"] in PROBES
        if self.rule.check_names and not probe and not self.rule.admits(name):
            where = ("a loopback name or address (localhost, 127.0.0.1, [::1])"
                     if self.rule.auth_off else "the names in ENGRAM_ALLOWED_HOSTS")
            return MisdirectedRequest(
                f"this service answers to {where}, not to {name!r}"
                + (", since its authentication is off (a page whose name points at this "
                   "machine could otherwise use it); list the name in "
                   "ENGRAM_ALLOWED_HOSTS if clients reach it by that name"
                   if self.rule.auth_off else ""))
        return None
