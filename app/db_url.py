"""The database URL's connection parameters, for both ways Engram reads the URL.

An operator copies a managed PostgreSQL's URL, in libpq's spelling
(`?sslmode=verify-full&sslrootcert=/etc/ca.pem&connect_timeout=5`), or writes
SQLAlchemy's (`?ssl=require`). SQLAlchemy's asyncpg dialect hands the query to
`asyncpg.connect` as keywords, which know `ssl` and `timeout` but none of libpq's words
(`sslmode` was a TypeError); the asyncpg pools (search reads, the worker) and libpq's
tools read the URL as a DSN, which knows libpq's words and makes any other a server
setting (`ssl` was "parameter cannot be changed now"). So neither spelling let `serve`
start. Both are taken now, on both paths: `connect_keywords` moves libpq's words into a
DSN beside the keywords, and `dsn` renders SQLAlchemy's `ssl` as `sslmode`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from sqlalchemy.engine import URL

# libpq's parameters that asyncpg reads from a DSN and has no keyword for.
DSN_ONLY = frozenset({
    "sslmode", "sslrootcert", "sslcert", "sslkey", "sslcrl", "sslpassword",
    "sslnegotiation", "ssl_min_protocol_version", "ssl_max_protocol_version",
    "target_session_attrs", "krbsrvname", "gsslib", "passfile", "service",
})


def connect_keywords(keywords: dict[str, Any]) -> None:
    """Make the keywords SQLAlchemy built from the URL ones `asyncpg.connect` takes, in
    place (a `do_connect` listener)."""
    from_dsn = {name: str(keywords.pop(name)) for name in list(keywords) if name in DSN_ONLY}
    if "sslmode" in from_dsn and "ssl" in keywords:
        del keywords["ssl"]  # the DSN's word would lose to the keyword; libpq's wins
    if "connect_timeout" in keywords:
        keywords["timeout"] = float(keywords.pop("connect_timeout"))
    # The connection's own name (`engram`, or `engram-cli`, by which a re-embedding tells
    # a service's connections from its own) is set in its server settings.
    keywords.pop("application_name", None)
    if from_dsn:
        keywords["dsn"] = "postgresql://?" + urlencode(from_dsn)


def dsn(url: URL) -> str:
    """`url` as asyncpg's DSN reader and libpq take it."""
    query = dict(url.query)
    ssl = query.pop("ssl", None)
    if ssl is not None:
        query.setdefault("sslmode", ssl)
    # libpq's word, but asyncpg's DSN reader would send it to the server as a setting;
    # the pools have their own connect timeout.
    query.pop("connect_timeout", None)
    return url.set(drivername="postgresql", query=query).render_as_string(hide_password=False)
