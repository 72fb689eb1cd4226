"""The database URL's query in both spellings (libpq's `sslmode`, SQLAlchemy's `ssl`), as
the keywords `asyncpg.connect` takes and as the DSN the asyncpg pools and libpq read."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.engine import make_url

from app.db_url import connect_keywords, dsn


def keywords(**query: Any) -> dict[str, Any]:
    found = {"host": "db", "port": 5432, "user": "u", "database": "d",
             "server_settings": {"application_name": "engram"}, "timeout": 10, **query}
    connect_keywords(found)
    return found


def test_libpq_words_go_to_a_dsn_beside_the_keywords() -> None:
    found = keywords(sslmode="verify-full", sslrootcert="/etc/ca.pem")
    assert found["dsn"] == "postgresql://?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem"
    assert not {"sslmode", "sslrootcert"} & found.keys()
    assert (found["host"], found["user"]) == ("db", "u")


def test_sqlalchemys_ssl_stays_a_keyword_unless_libpqs_word_is_given_too() -> None:
    assert keywords(ssl="require")["ssl"] == "require"
    both = keywords(ssl="disable", sslmode="require")
    assert "ssl" not in both
    assert both["dsn"] == "postgresql://?sslmode=require"


def test_connect_timeout_is_the_connect_timeout_and_the_name_stays_engrams() -> None:
    found = keywords(connect_timeout="5", application_name="theirs")
    assert found["timeout"] == 5.0
    assert not {"connect_timeout", "application_name"} & found.keys()
    assert found["server_settings"] == {"application_name": "engram"}
    assert "dsn" not in found


@pytest.mark.parametrize(("url", "expected"), [
    ("postgresql+asyncpg://u:p%40w@db:5432/d?ssl=require",
     "postgresql://u:p%40w@db:5432/d?sslmode=require"),
    ("postgresql+asyncpg://u@db/d?sslmode=verify-ca&ssl=disable",
     "postgresql://u@db/d?sslmode=verify-ca"),
    ("postgresql+asyncpg://u@db/d?connect_timeout=5&sslmode=require",
     "postgresql://u@db/d?sslmode=require"),
    ("postgresql+asyncpg://postgres@/engram?host=/tmp/pg",
     "postgresql://postgres@/engram?host=%2Ftmp%2Fpg"),
])
def test_the_dsn_is_in_libpqs_words(url: str, expected: str) -> None:
    assert dsn(make_url(url)) == expected
