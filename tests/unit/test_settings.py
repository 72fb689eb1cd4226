"""Settings: defaults, the ENGRAM_ prefix, one-line errors, and the refusal to expose an
unauthenticated service beyond loopback."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.settings import Settings, format_settings_error, unknown_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ENGRAM_* variable from the developer's shell leaks into these tests."""
    for name in list(os.environ):
        if name.startswith("ENGRAM_"):
            monkeypatch.delenv(name)


def load(**kwargs: object) -> Settings:
    return Settings(_env_file=None, **kwargs)  # type: ignore[call-arg]


def test_defaults() -> None:
    settings = load()

    assert settings.host == "127.0.0.1"
    assert settings.port == 8080
    assert settings.data_dir == Path(".engram")
    assert settings.database_url is None
    assert settings.async_database_url is None
    assert settings.auth_enabled is False
    assert settings.embedder == "local"
    assert settings.embedder_runtime == "onnx"
    assert settings.model_cache_dir is None
    assert settings.search_min_similarity is None
    assert settings.min_similarity == 0.25
    assert settings.db_tcp_timeout_seconds == 30
    assert settings.migration_lock_timeout_seconds == 10.0
    assert settings.startup_problem() is None


def test_reads_engram_prefixed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_PORT", "9123")
    monkeypatch.setenv("ENGRAM_HOST", "::1")
    monkeypatch.setenv("ENGRAM_DATA_DIR", "/tmp/engram-x")
    monkeypatch.setenv("ENGRAM_EMBEDDER", "hash")
    monkeypatch.setenv("ENGRAM_AUTH_ENABLED", "true")
    # Unprefixed names are not settings.
    monkeypatch.setenv("PORT", "1")

    settings = load()

    assert settings.port == 9123
    assert settings.host == "::1"
    assert settings.data_dir == Path("/tmp/engram-x")
    assert settings.embedder == "hash"
    assert settings.auth_enabled is True


def test_a_bad_port_gives_one_line_naming_engram_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_PORT", "notaport")

    with pytest.raises(ValidationError) as caught:
        load()

    message = format_settings_error(caught.value)
    assert "\n" not in message
    assert "ENGRAM_PORT" in message


@pytest.mark.parametrize(("name", "value"), [
    ("ENGRAM_EMBEDDER_RUNTIME", "tensorflow"),
    ("ENGRAM_SEARCH_MIN_SIMILARITY", "1.5"),
    ("ENGRAM_SEARCH_MIN_SIMILARITY", "-2"),
    # Recorded as the stored vectors' model, empty read as none recorded: any embedder
    # then started over them.
    ("ENGRAM_OPENAI_EMBEDDING_MODEL", ""),
])
def test_a_bad_runtime_or_floor_is_named(monkeypatch: pytest.MonkeyPatch, name: str,
                                         value: str) -> None:
    monkeypatch.setenv(name, value)

    with pytest.raises(ValidationError) as caught:
        load()

    assert name in format_settings_error(caught.value)


@pytest.mark.parametrize(("name", "value", "says"), [
    # Path("") is the current directory: the cluster went wherever the service started.
    ("ENGRAM_DATA_DIR", "", "must not be empty"),
    ("ENGRAM_DATA_DIR", "  ", "must not be empty"),
    # NaN passed the bounds and was then called "less than or equal to 1000000".
    ("ENGRAM_TENANT_RATE_LIMIT", "nan", "finite number"),
    ("ENGRAM_SEARCH_RECENCY_WEIGHT", "inf", "finite number"),
    ("ENGRAM_OPENAI_TIMEOUT_SECONDS", "NaN", "finite number"),
    # Found by a settings probe:
    # 1/5e-324 is infinity: the Retry-After of a refused request answered 500.
    ("ENGRAM_TENANT_RATE_LIMIT", "5e-324", "one request a day"),
    ("ENGRAM_TENANT_RATE_LIMIT", "0.00001", "one request a day"),
    # An idle service spun a core.
    ("ENGRAM_EMBEDDED_WATCH_SECONDS", "1e-6", "0 (never) or at least 0.1"),
    ("ENGRAM_EXPIRED_PURGE_SECONDS", "1e-6", "greater than or equal to 0.1"),
    ("ENGRAM_TERM_STATS_FOLD_SECONDS", "0.01", "greater than or equal to 0.1"),
    ("ENGRAM_SESSION_RETRY_SECONDS", "1e-9", "greater than or equal to 0.1"),
    ("ENGRAM_SESSION_PROBE_SECONDS", "1e-9", "greater than or equal to 0.1"),
    # A URL with no host was taken, and every call failed at request time.
    ("ENGRAM_LLM_BASE_URL", "http://", "names no host"),
    ("ENGRAM_OPENAI_BASE_URL", "https:///v1", "names no host"),
    ("ENGRAM_OPENAI_BASE_URL", "http://h:99999/v1", "is not a URL"),
    ("ENGRAM_LLM_BASE_URL", "ftp://h/v1", "http:// or https://"),
    # A blank model name was sent as is.
    ("ENGRAM_OPENAI_EMBEDDING_MODEL", "   ", "must name a model"),
    ("ENGRAM_LLM_MODEL", "", "must name a model"),
])
def test_a_value_no_service_can_run_with_is_named(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(name, value)

    with pytest.raises(ValidationError) as caught:
        load()

    message = format_settings_error(caught.value)
    assert message.startswith(f"invalid setting {name}: ")
    assert says in message
    assert "Value error" not in message


def test_an_empty_model_cache_dir_means_the_data_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_MODEL_CACHE_DIR", "")

    assert load().model_cache_dir is None


@pytest.mark.parametrize(("embedder", "floor"), [("local", 0.25), ("openai", -1.0),
                                                  ("hash", -1.0)])
def test_the_relevance_floor_is_the_embedders_unless_set(embedder: str, floor: float) -> None:
    extra = {"openai_base_url": "http://127.0.0.1:9/v1"} if embedder == "openai" else {}

    assert load(embedder=embedder, **extra).min_similarity == floor
    assert load(embedder=embedder, search_min_similarity=0.1, **extra).min_similarity == 0.1


def test_the_model_cache_follows_the_data_dir_unless_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from app.providers.embedder import build_embedder
    from app.providers.local_embedder import LocalEmbedder

    monkeypatch.setenv("ENGRAM_DATA_DIR", "/tmp/engram-x")
    default = build_embedder(load())
    monkeypatch.setenv("ENGRAM_MODEL_CACHE_DIR", "/srv/models")
    chosen = build_embedder(load())

    assert isinstance(default, LocalEmbedder)
    assert isinstance(chosen, LocalEmbedder)
    assert default._cache_dir == Path("/tmp/engram-x/models")
    assert chosen._cache_dir == Path("/srv/models")


@pytest.mark.parametrize("port", ["0", "65536", "-1"])
def test_an_out_of_range_port_is_refused(monkeypatch: pytest.MonkeyPatch, port: str) -> None:
    monkeypatch.setenv("ENGRAM_PORT", port)

    with pytest.raises(ValidationError) as caught:
        load()

    message = format_settings_error(caught.value)
    assert "\n" not in message
    assert "ENGRAM_PORT" in message


def test_maintenance_memory_past_postgresqls_range_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # PostgreSQL refused it only once the shared buffers had been written beside it.
    monkeypatch.setenv("ENGRAM_EMBEDDED_MAINTENANCE_WORK_MEM_MB", "3000000")

    with pytest.raises(ValidationError) as caught:
        load()

    message = format_settings_error(caught.value)
    assert message.startswith("invalid setting ENGRAM_EMBEDDED_MAINTENANCE_WORK_MEM_MB: ")
    assert "2097151" in message


def test_several_bad_settings_still_give_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_PORT", "x")
    monkeypatch.setenv("ENGRAM_EMBEDDER", "gpt-9")

    with pytest.raises(ValidationError) as caught:
        load()

    message = format_settings_error(caught.value)
    assert "\n" not in message
    assert "ENGRAM_PORT" in message
    assert "ENGRAM_EMBEDDER" in message


def test_startup_problem_when_auth_is_disabled_on_all_interfaces() -> None:
    problem = load(host="0.0.0.0").startup_problem()

    assert problem is not None
    assert "\n" not in problem
    assert "ENGRAM_AUTH_ENABLED" in problem
    assert "0.0.0.0" in problem


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.10", "engram.example.com"])
def test_non_loopback_hosts_need_auth(host: str) -> None:
    assert load(host=host).startup_problem() is not None
    assert load(host=host, auth_enabled=True).startup_problem() is None


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_hosts_start_without_auth(host: str) -> None:
    assert load(host=host).startup_problem() is None


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("postgresql://u:p@db:5432/engram", "postgresql+asyncpg://u:p@db:5432/engram"),
        ("postgres://u@db/engram", "postgresql+asyncpg://u@db/engram"),
        ("postgresql+asyncpg://u@db/engram", "postgresql+asyncpg://u@db/engram"),
    ],
)
def test_database_url_is_normalised_for_asyncpg(given: str, expected: str) -> None:
    settings = load(database_url=given)

    assert settings.database_url == given
    assert settings.async_database_url == expected


def test_an_empty_database_url_means_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_DATABASE_URL", "")

    assert load().async_database_url is None


def test_a_non_postgres_database_url_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        load(database_url="mysql://u@db/engram")

    message = format_settings_error(caught.value)
    assert "ENGRAM_DATABASE_URL" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("url", "said"),
    [
        # SQLAlchemy's traceback from inside the lifespan, before.
        ("postgresql://u:hunter2@db:abc/engram", "the port must be one number"),
        ("postgresql://u:hunter2@db1:5432,db2:5432/engram", "the port must be one number"),
        # "Connection refused" at start, before: read as a server down.
        ("postgresql://u:hunter2@db:99999/engram", "port 99999 is out of range"),
        ("postgresql://u:hunter2@db:0/engram", "port 0 is out of range"),
        # libpq's ?port= beside a socket's ?host= (a re-probe).
        ("postgresql://u:hunter2@/engram?host=/tmp&port=abc", "port 'abc' is not a number"),
        ("postgresql://u:hunter2@/engram?host=/tmp&port=99999", "port 99999 is out of range"),
    ],
)
def test_a_database_url_with_a_bad_port_is_one_line_at_start(url: str, said: str) -> None:
    with pytest.raises(ValidationError) as caught:
        load(database_url=url)

    message = format_settings_error(caught.value)
    assert message.startswith("invalid setting ENGRAM_DATABASE_URL")
    assert said in message
    assert "\n" not in message
    assert "hunter2" not in message


@pytest.mark.parametrize("url", [
    "postgresql://u@/engram?host=/var/run/postgresql",
    "postgresql://u:p%40ss@db:65535/engram?sslmode=require",
    "postgres://db/engram",
    "postgresql://u@/engram?host=/var/run/postgresql&port=5433",
])
def test_database_urls_without_a_port_or_with_a_good_one_are_taken(url: str) -> None:
    assert load(database_url=url).database_url == url


def test_openai_embedder_needs_a_key_for_the_public_api() -> None:
    with pytest.raises(ValidationError) as caught:
        load(embedder="openai")
    assert "ENGRAM_OPENAI_API_KEY" in format_settings_error(caught.value)

    local = load(embedder="openai", openai_base_url="http://127.0.0.1:9999/v1/")
    assert local.openai_base_url == "http://127.0.0.1:9999/v1"


def test_a_fold_must_take_at_least_one_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_SESSION_FOLD_THRESHOLD", "10")
    monkeypatch.setenv("ENGRAM_SESSION_RECENT_TURNS", "10")
    with pytest.raises(ValidationError) as caught:
        load()
    assert "ENGRAM_SESSION_RECENT_TURNS must be less than ENGRAM_SESSION_FOLD_THRESHOLD" \
        in format_settings_error(caught.value)
    assert load(session_fold_threshold=10, session_recent_turns=9).session_recent_turns == 9


def test_the_llm_summariser_needs_an_llm() -> None:
    with pytest.raises(ValidationError) as caught:
        load(session_summariser="llm")
    assert "ENGRAM_SESSION_SUMMARISER=llm needs ENGRAM_LLM_BASE_URL" in str(caught.value)
    configured = load(session_summariser="llm", llm_base_url="http://127.0.0.1:9/v1")
    assert configured.session_summariser == "llm"
    assert load().session_summariser == "auto"


@pytest.mark.parametrize("value", ["-1", "a month", "36501"])
def test_a_bad_session_retention_stops_start_up_naming_it(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("ENGRAM_SESSION_RETENTION_DAYS", value)
    with pytest.raises(ValidationError) as caught:
        load()
    assert "ENGRAM_SESSION_RETENTION_DAYS" in format_settings_error(caught.value)
    monkeypatch.delenv("ENGRAM_SESSION_RETENTION_DAYS")
    assert load().session_retention_days == 0  # off unless set
    assert load(session_retention_days=30).session_retention_days == 30


def test_the_tcp_timeout_is_whole_seconds_from_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_DB_TCP_TIMEOUT_SECONDS", "-1")
    with pytest.raises(ValidationError) as caught:
        load()
    assert "ENGRAM_DB_TCP_TIMEOUT_SECONDS" in format_settings_error(caught.value)
    monkeypatch.setenv("ENGRAM_DB_TCP_TIMEOUT_SECONDS", "0")
    assert load().db_tcp_timeout_seconds == 0


def test_every_setting_is_in_the_readme() -> None:
    """The README's configuration table names every setting (a row may name a family,
    `ENGRAM_SEARCH_*`): 23 were only in app/settings.py until 2026-11-27."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    named = set(re.findall(r"`(ENGRAM_[A-Z0-9_]+\*?)`", readme))
    families = [name.removesuffix("*") for name in named if name.endswith("*")]
    settings = [f"ENGRAM_{field.upper()}" for field in Settings.model_fields]
    missing = [name for name in settings
               if name not in named and not any(name.startswith(f) for f in families)]
    assert missing == []
    assert len(settings) > 80


def test_a_misspelt_variable_is_named_with_the_setting_it_resembles() -> None:
    """ENGRAM_AUTH_ENABLE=true was ignored in silence, leaving authentication off."""
    lines = unknown_settings({"ENGRAM_AUTH_ENABLE": "true", "ENGRAM_PORT": "8080",
                              "engram_log_level": "info", "ENGRAM_NOTHING_LIKE_IT": "1",
                              "PATH": "/bin"})
    assert lines == [
        "ENGRAM_AUTH_ENABLE is not a setting and is ignored (did you mean "
        "ENGRAM_AUTH_ENABLED?)",
        "ENGRAM_NOTHING_LIKE_IT is not a setting and is ignored"]


def test_a_misspelt_line_of_the_env_file_is_named_too(tmp_path: Path) -> None:
    """Found by an exploratory probe: the `.env` file, which Settings reads, was not
    checked, so `ENGRAM_AUTH_ENABLE=true` there left authentication off in silence."""
    env_file = tmp_path / ".env"
    env_file.write_text("ENGRAM_AUTH_ENABLE=true\nENGRAM_PORT=8080\nOTHER=1\n")

    lines = unknown_settings({"ENGRAM_FUZZ_EXAMPLES": "50"}, env_file)

    assert lines == [f"ENGRAM_AUTH_ENABLE (in {env_file}) is not a setting and is ignored "
                     "(did you mean ENGRAM_AUTH_ENABLED?)"]


def test_a_rule_across_settings_is_said_in_its_own_words(monkeypatch: pytest.MonkeyPatch) -> None:
    # It read "invalid setting settings: Value error, ...".
    monkeypatch.setenv("ENGRAM_SESSION_SUMMARISER", "llm")

    with pytest.raises(ValidationError) as caught:
        load()

    assert format_settings_error(caught.value) == (
        "invalid setting ENGRAM_SESSION_SUMMARISER=llm needs ENGRAM_LLM_BASE_URL")



def test_the_log_level_is_taken_in_either_case() -> None:
    """Found by an operator probe: ENGRAM_LOG_LEVEL=INFO, Python's own spelling, was
    refused at start."""
    assert Settings(log_level="INFO").log_level == "info"
    assert Settings(log_level="Warning").log_level == "warning"


@pytest.mark.parametrize("prefix", ["openai", "llm"])
def test_url_credentials_and_a_bearer_key_cannot_both_be_sent(prefix: str) -> None:
    """An observability probe: httpx sends a URL's user:password@ as HTTP Basic in place
    of the key's Bearer, so the key set was never sent."""
    url = {f"{prefix}_base_url": "http://user:secret@gateway.example/v1",
           f"{prefix}_api_key": "sk-key"}
    with pytest.raises(ValidationError) as caught:
        Settings(**url)  # type: ignore[arg-type]
    said = format_settings_error(caught.value)
    assert f"ENGRAM_{prefix.upper()}_BASE_URL's user and password" in said
    assert "secret" not in said
    assert "sk-key" not in said
    # In another header, both go.
    Settings(**url, **{f"{prefix}_api_key_header": "api-key"})  # type: ignore[arg-type]


@pytest.mark.parametrize(("url", "key"), [
    ("http://@gateway.example/v1", "sk-key"),  # no user, no password: no Basic header
    ("http://user:secret@gateway.example/v1", ""),  # an empty key is not sent
])
def test_url_credentials_and_a_key_that_do_not_meet_are_taken(url: str, key: str) -> None:
    Settings(openai_base_url=url, openai_api_key=key)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["engram.example:8080", "http://engram.example", "a b",
                                   "*.example.com"])
def test_allowed_hosts_are_names_without_ports_or_schemes(value: str) -> None:
    with pytest.raises(ValidationError) as caught:
        load(allowed_hosts=f"localhost, {value}")

    message = format_settings_error(caught.value)
    assert "ENGRAM_ALLOWED_HOSTS" in message
    assert repr(value) in message


def test_allowed_hosts_are_read_as_a_list() -> None:
    assert load(allowed_hosts=" a.example, [::1],*, ").allowed_host_names == (
        "a.example", "[::1]", "*")


# --- found by a settings probe -----------------------------------------------------------


@pytest.mark.parametrize(("name", "value"), [
    ("ENGRAM_TENANT_RATE_LIMIT", "0"),
    ("ENGRAM_TENANT_RATE_LIMIT", str(1 / 86400)),
    ("ENGRAM_EMBEDDED_WATCH_SECONDS", "0"),
    ("ENGRAM_EMBEDDED_WATCH_SECONDS", "0.1"),
    ("ENGRAM_EXPIRED_PURGE_SECONDS", "0.1"),
    ("ENGRAM_OPENAI_BASE_URL", "HTTPS://api.example.com/v1"),
    ("ENGRAM_LLM_BASE_URL", "http://[::1]:8000/v1/"),
])
def test_the_edge_of_each_bound_is_taken(monkeypatch: pytest.MonkeyPatch, name: str,
                                         value: str) -> None:
    monkeypatch.setenv(name, value)

    load()


@pytest.mark.parametrize("key", ["", "   "])
@pytest.mark.parametrize("url", ["https://api.openai.com/v1", "https://API.OpenAI.com/v1"])
def test_a_blank_key_for_the_public_openai_is_no_key(monkeypatch: pytest.MonkeyPatch,
                                                     key: str, url: str) -> None:
    """`ENGRAM_OPENAI_API_KEY=` passed the check that api.openai.com has a key (and so did
    no key with the host spelt in capitals)."""
    monkeypatch.setenv("ENGRAM_EMBEDDER", "openai")
    monkeypatch.setenv("ENGRAM_OPENAI_BASE_URL", url)
    monkeypatch.setenv("ENGRAM_OPENAI_API_KEY", key)

    with pytest.raises(ValidationError) as caught:
        load()

    assert "ENGRAM_OPENAI_API_KEY is required" in format_settings_error(caught.value)


def test_a_blank_llm_key_is_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_LLM_API_KEY", " ")

    assert load().llm_api_key is None


@pytest.mark.parametrize("host", ["LOCALHOST", "LocalHost"])
def test_localhost_in_any_case_is_loopback(host: str) -> None:
    assert load(host=host).startup_problem() is None


def test_a_bad_value_from_the_env_file_says_it_came_from_there(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("ENGRAM_PORT=eighty\n")

    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=env_file)  # type: ignore[call-arg]

    assert format_settings_error(caught.value, environ={}, env_file=env_file).startswith(
        f"invalid setting ENGRAM_PORT (in {env_file}): ")
    # From the environment, where it overrides the file, it is named plainly.
    assert format_settings_error(caught.value, environ={"ENGRAM_PORT": "eighty"},
                                 env_file=env_file).startswith("invalid setting ENGRAM_PORT: ")


def test_an_env_file_that_is_not_utf8_is_named_in_one_line(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_bytes(b"ENGRAM_PORT=8080\nENGRAM_HOST=caf\xe9\n")

    for read in (lambda: unknown_settings({}, env_file),
                 lambda: Settings(_env_file=env_file)):  # type: ignore[call-arg]
        with pytest.raises(UnicodeDecodeError) as caught:
            read()
        assert format_settings_error(caught.value, env_file=env_file) == (
            f"cannot read {env_file}: it is not UTF-8 text (byte 0xe9 at offset 32)")
