"""An endpoint's URL under the operator's base URL."""

from __future__ import annotations

import pytest

from app.providers.endpoint_url import endpoint_url


@pytest.mark.parametrize(("base", "url"), [
    ("http://h/v1", "http://h/v1/embeddings"),
    ("http://h/v1/", "http://h/v1/embeddings"),
    ("http://h", "http://h/embeddings"),
    # The query stays a query: it had gone into the path (an exploratory probe).
    ("http://h/openai/deployments/emb?api-version=2024-02-01",
     "http://h/openai/deployments/emb/embeddings?api-version=2024-02-01"),
    ("http://u:p@h:8080/v1/?api-key=gw", "http://u:p@h:8080/v1/embeddings?api-key=gw"),
    ("http://[::1]:9/v1", "http://[::1]:9/v1/embeddings"),
    # An encoded path stays as written (a re-probe: "%3F" raised InvalidURL at start).
    ("http://h/gw%3Fx/v1", "http://h/gw%3Fx/v1/embeddings"),
    ("http://h/a%2Fb/v1", "http://h/a%2Fb/v1/embeddings"),
    ("http://h/p%25q/v1", "http://h/p%25q/v1/embeddings"),
])
def test_the_name_goes_under_the_path_and_the_query_stays(base: str, url: str) -> None:
    assert str(endpoint_url(base, "embeddings")) == url
