"""Candidate retrieval: BM25 full-text matches and nearest neighbours, in two statements.

Both share one filter (tenant, scope, tags, categories, creation window, metadata, not
archived, not expired):

- Text (`text_matches`): Okapi BM25. A scope under `exact_below` rows is scored with its
  own statistics, counted on it (every row of it holding a query term is read, no index
  needed); a larger one with the tenant's, from `term_stats` (kept by triggers), so no
  query counts thousands of matches. There at most `text_match_cap` rows are scored,
  found on the GIN index through the query's rarest terms (an index keyed by tenant and
  user as well, so other scopes' rows are dropped inside it, except for a tenant holding
  most of the table, see `_rare_term_keys`; for a user, a term's rows are estimated as
  its tenant's times the user's share, see `_scope_share`), so a query of common words
  cannot make the tail grow with the table.
- Vector (`candidates`): a small scope is ranked by exact cosine distance over the btree
  on the scope (`+ 0` keeps the planner off the HNSW index, which returns too few rows
  for a small scope), and so is a larger scope too small a share of the HNSW index for
  its filtered scan to pay (app/search/vector_path.py; the text statement returns the
  sizes: a user's rows from term_stats, another scope column's entries counted up to the
  crossover, or the tenant's rows, and no more than the tenant's rows with the filter's
  tags or categories);
  the others go through HNSW with pgvector's iterative scan. The choice is a one-time
  filter on a parameter, so only one branch runs. HNSW coming back with fewer rows than
  asked (a scope too sparse in the index for its scan limit) runs the statement again on
  the exact branch. The same statement reads the rows of both lists, and places them in
  each (`_ranked`, app/search/list_ranks.py).

The text statement needs no query vector, so the service runs it while the query is
embedded: a search waits for one round trip after the embedding, as with a single
statement, and the full-text work (most of the SQL in a large scope) is off its path.

Both run with generic plans, planned once per connection (planning the single statement
they replaced took ~2-3 ms): every branch is written so that it has one possible plan
whatever the scope's size (see `_where`). They run on the search's own asyncpg pool
(app/search/reader.py), whose connections are set up for that.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, NamedTuple

from app.db import Fetcher
from app.memories.repository import ANSWER_KEYS, ANSWER_SQL, LIVE_SQL, answer_record
from app.memories.schemas import Memory
from app.models import SCOPE_COLUMNS
from app.models.vector import vector_text
from app.search.list_ranks import shared_places, with_rows_missed
from app.search.term_stats import CATEGORY_KEY, TAG_KEY, USER_KEY
from app.search.vector_path import prefers_exact


@dataclass(frozen=True)
class SearchFilter:
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    namespace: str | None = None
    tags: Sequence[str] | None = None
    categories: Sequence[str] | None = None
    include_summaries: bool = True
    created_after: datetime | None = None
    created_before: datetime | None = None
    metadata: dict[str, Any] | None = None  # jsonb containment; None or {}: any

    def scoped(self) -> bool:
        """Whether a scope column (user, agent, session, namespace) bounds the search."""
        return self.user_id is not None or self.scoped_beyond_user()

    def scoped_beyond_user(self) -> bool:
        """Whether an agent, session or namespace bounds the search (which term_stats does
        not count, and the text index's keys do not hold)."""
        return any(getattr(self, c) is not None for c in SCOPE_COLUMNS if c != "user_id")

    def narrows(self) -> bool:
        """Whether anything but the tenant bounds the search (summaries count as rows)."""
        return self.scoped() or bool(self.tags or self.categories) or self.uncounted()

    def uncounted(self) -> bool:
        """Whether a filter that term_stats does not count narrows the search (the
        creation window, metadata): its counts are then only an upper bound."""
        return (self.created_after is not None or self.created_before is not None
                or bool(self.metadata))


@dataclass(frozen=True)
class RetrievalLimits:
    """The statements' depths and bounds (Settings' search_* fields, see there)."""

    vector_candidates: int = 20
    hnsw_candidates: int = 20
    text_candidates: int = 50
    exact_below: int = 1000
    exact_cost_ratio: float = 9.0
    text_match_cap: int = 500
    text_max_df: int = 5000
    text_common_share: float = 1.0
    text_keyless_share: float = 0.75
    bm25_k1: float = 1.2
    bm25_b: float = 0.75


@dataclass(frozen=True, slots=True)
class TextMatches:
    """The full-text list (ids best first, their BM25 scores), whether the scope was
    small enough for the exact branches, and the sizes the vector ranking is chosen by:
    an upper bound of the scope's active rows and the table's rows (an estimate; 0 when
    unknown)."""

    small: bool
    ids: tuple[uuid.UUID, ...] = ()
    scores: tuple[float, ...] = ()
    day_only: tuple[bool, ...] = ()  # matched by the row's day words alone
    versions: tuple[int, ...] = ()  # each row's `version` when it was scored
    scope_rows: float = 0.0
    index_rows: float = 0.0


class RetrievedRow(NamedTuple):
    """A candidate row: the memory's columns as the vector statement returned them (in
    `ANSWER_KEYS` order) and its places in the two lists. A named tuple, and the Memory
    model built on demand (`memory()`), metadata still JSON text until then: building
    and validating all ~120 candidates took ~3 ms of a search, and only the `top_k` that
    survive the pipeline are answered."""

    memory_id: uuid.UUID
    importance: float
    created_at: datetime
    fact_role: str
    columns: Sequence[Any]
    vector_rank: float | None  # a place: tied rows share the mean of theirs
    vector_similarity: float | None
    text_rank: float | None
    text_score: float | None
    covered_days: tuple[date, ...] = ()
    covers: tuple[uuid.UUID, ...] = ()
    text_day_only: bool = False

    def memory(self) -> Memory:
        return Memory.model_validate(answer_record(self.columns))


# The query's lexemes, the tenant's statistics for them, and the rare terms a large scope
# is matched through. A template (`text_match_cap`, `scope_share`: an SQL expression for
# the share of the tenant's rows the GIN scan's keys leave, "1" for the whole tenant;
# :qtext, :tenant_id, :text_max_df), also read by bench/retrieval_eval.py, which replays
# the large-scope match.
QUERY_TERM_CTES = """
terms AS MATERIALIZED (
    -- quote_literal switches to E'' syntax for a backslash, which tsquery cannot read.
    SELECT DISTINCT lexeme
    -- Read as the content is indexed (migration 0032), by the database's Unicode tables.
    FROM unnest(tsvector_to_array(to_tsvector('english', engram_text_form(:qtext)))) AS lexeme
    WHERE strpos(lexeme, chr(92)) = 0
),
query AS MATERIALIZED (
    SELECT coalesce(array_agg(lexeme), '{{}}') AS lexemes,
           coalesce(string_agg(quote_literal(lexeme), ' | '), '')::tsquery AS any_term,
           -- The same terms in a row's content only (weight A; its day words are D).
           coalesce(string_agg(quote_literal(lexeme) || ':A', ' | '), '')::tsquery
               AS content_term
    FROM terms
),
-- The tenant's document frequencies and its corpus row (''): a few index entries.
tenant_stats AS MATERIALIZED (
    SELECT s.lexeme, sum(s.df)::float8 AS df, sum(s.total_len)::float8 AS len
    FROM term_stats s
    WHERE s.tenant_id = :tenant_id
      AND s.lexeme = ANY((SELECT lexemes FROM query) || ''::text)
    GROUP BY s.lexeme
),
-- In a large scope the GIN index finds the rows of the rarest terms: as many terms as
-- fit `text_match_cap` postings, and the rarest always unless it is in more than
-- `text_max_df` rows. The bitmap of a common term is what made full-text search slow,
-- and a row holding only common terms scores below the rare-term rows. The postings
-- counted are those the scan's keys leave: a term's tenant frequency times the scope's
-- share, so a word common in a big tenant still finds one user's few rows holding it.
rare_lexemes AS MATERIALIZED (
    SELECT lexeme FROM (
        SELECT lexeme, df,
               row_number() OVER (ORDER BY df, lexeme) AS k,
               sum(df) OVER (ORDER BY df, lexeme ROWS UNBOUNDED PRECEDING) AS run
        FROM (SELECT lexeme, df * ({scope_share}) AS df
              FROM tenant_stats WHERE lexeme <> '' AND df > 0) s
    ) t
    WHERE (k = 1 OR run <= {text_match_cap}) AND df <= :text_max_df
),
rare_terms AS MATERIALIZED (
    SELECT coalesce(string_agg(quote_literal(lexeme), ' | '), '')::tsquery AS q
    FROM rare_lexemes
)
"""

_TEXT_SQL = """
WITH
-- The table's rows, standing for the HNSW index's: the planner's estimate, which
-- autovacuum and autoanalyze keep (a catalog lookup, no count; the index's own figure is
-- only refreshed when a vacuum finds dead rows in it). Archived rows make it an
-- overestimate, which errs towards the exact ranking. And the most rows a scope can
-- hold for the exact ranking still to beat HNSW at this statement's vector depth (the
-- crossover of app/search/vector_path.py).
index_size AS MATERIALIZED (
    SELECT n, ceil(sqrt(greatest(CAST(:exact_cost_ratio AS float8), 0) * {kv} * n)) AS cap
    FROM (SELECT greatest(reltuples, 0)::float8 AS n FROM pg_class
           WHERE oid = CAST('memories' AS regclass)) i
),
{small},
""" + QUERY_TERM_CTES + """,
matched AS MATERIALIZED (
    -- A small scope: every row of it that holds a query term. ts_match_vq is @@ as a
    -- function, which no index matches: the planner filters the scope's rows instead
    -- of building a GIN bitmap over the whole tenant.
    SELECT m.id, m.tsv, m.version FROM memories m
    WHERE {where} AND (SELECT yes FROM small)
      AND ts_match_vq(m.tsv, (SELECT any_term FROM query))
    UNION ALL
    -- A large scope: the rare terms' rows, intersected with the scope's keys inside a
    -- full-text index before the heap is read (see `_rare_term_keys`).
    (SELECT * FROM ({rare_term_rows}) r LIMIT {text_match_cap})
),
postings AS MATERIALIZED (
    -- Each matched row's entries for the query's lexemes only (re-weighted so those are
    -- its only A entries, then filtered): a long row is not unnested whole.
    SELECT mt.id, length(mt.tsv)::float8 AS dl, e.lexeme,
           coalesce(array_length(e.positions, 1), 1)::float8 AS tf
    FROM matched mt
    CROSS JOIN LATERAL unnest(ts_filter(
        setweight(setweight(mt.tsv, 'D'), 'A', (SELECT lexemes FROM query)), '{{a}}'
    )) AS e
),
-- BM25's statistics: a small scope's own, counted on it (every row of it holding a query
-- term is in `matched`), so that inside one user's memories a word that user says all
-- the time is worth little; a large scope's from the tenant's term statistics.
collection AS MATERIALIZED (
    SELECT n, avgdl FROM small WHERE yes
    UNION ALL
    SELECT greatest(df, 1), greatest(len / greatest(df, 1), 1)
    FROM tenant_stats WHERE lexeme = '' AND NOT (SELECT yes FROM small)
),
idf AS MATERIALIZED (
    SELECT d.lexeme, ln(1 + (c.n - d.df + 0.5) / (d.df + 0.5)) AS w,
           -- Held by few enough rows to tell a row from the others (`text_common_share`;
           -- in a scope of a few rows, by two at least).
           d.df <= greatest(c.n * CAST(:common_share AS float8), 2) AS telling
    FROM (
        SELECT lexeme, count(*)::float8 AS df FROM postings
        WHERE (SELECT yes FROM small) GROUP BY lexeme
        UNION ALL
        SELECT lexeme, df FROM tenant_stats
        WHERE lexeme <> '' AND df > 0 AND NOT (SELECT yes FROM small)
    ) d
    CROSS JOIN collection c
),
-- A row that holds only query terms most rows hold still matches, but scores 0, tied
-- with every such row: its BM25 score would differ from theirs by its length alone, and
-- the fusion's places would make that a third of the score.
bm25 AS (
    SELECT p.id,
           CASE WHEN bool_or(idf.telling)
                THEN sum(idf.w * (p.tf * (CAST(:k1 AS float8) + 1))
                         / (p.tf + CAST(:k1 AS float8)
                            * (1 - CAST(:b AS float8) + CAST(:b AS float8) * p.dl
                               / (SELECT avgdl FROM collection))))
                ELSE 0 END AS score
    FROM postings p
    JOIN idf ON idf.lexeme = p.lexeme
    GROUP BY p.id
),
-- The list, and for each row: whether it matched by its day words alone (the relevance
-- floor does not count those as tied to the query: a year or "may" in it is no day it
-- names), and the state it was scored in (the vector statement, in a later snapshot,
-- drops the text list's place of a row changed since: its text may no longer match).
-- One join for both (`matched` holds each row once: its branches' rows are disjoint).
txt AS MATERIALIZED (
    SELECT t.id, t.score, mt.version,
           NOT ts_match_vq(mt.tsv, (SELECT content_term FROM query)) AS day_only
    FROM (SELECT id, score FROM bm25 ORDER BY score DESC, id LIMIT {kt}) t
    JOIN matched mt ON mt.id = t.id
),
-- One ordering for the four arrays: the aggregate sorts its input once.
listed AS MATERIALIZED (
    SELECT coalesce(array_agg(id ORDER BY score DESC, id), '{{}}') AS ids,
           coalesce(array_agg(score ORDER BY score DESC, id), '{{}}') AS scores,
           coalesce(array_agg(day_only ORDER BY score DESC, id), '{{}}') AS day_only,
           coalesce(array_agg(version ORDER BY score DESC, id), '{{}}') AS versions
    FROM txt
)
SELECT (SELECT yes FROM small) AS small, l.ids, l.scores, l.day_only, l.versions,
       -- An upper bound of the scope's active rows: its counted rows when fewer than the
       -- cap, else the tenant's rows; and no more than its tags' or categories' rows in
       -- the tenant (see `_filter_rows`).
       least(CASE WHEN (SELECT counted FROM small) < (SELECT cap FROM index_size)
                  THEN (SELECT counted FROM small)
                  ELSE coalesce((SELECT df FROM tenant_stats WHERE lexeme = ''), 0)
             END, {filter_rows}) AS scope_rows,
       (SELECT n FROM index_size) AS index_rows
FROM listed l
"""

# The text list comes back in as arrays (its rank is the position); `small` is the text
# statement's probe, so the vector half takes the same branch without probing again.
_VECTOR_SQL = """
WITH
txt AS MATERIALIZED (
    SELECT t.id, t.score, t.day_only, t.version
    FROM unnest(CAST(:text_ids AS uuid[]), CAST(:text_scores AS float8[]),
                CAST(:text_day_only AS boolean[]), CAST(:text_versions AS int[]))
         AS t(id, score, day_only, version)
),
-- The vector half. In a large scope every filter is unindexed (see `_where`), so the only
-- plan is the HNSW scan, in a generic plan too.
vec_exact AS (
    SELECT m.id, m.embedding <=> CAST(:q AS halfvec(384)) AS dist
    FROM memories m
    WHERE {where} AND CAST(:small AS boolean)
    ORDER BY (m.embedding <=> CAST(:q AS halfvec(384))) + 0
    LIMIT {kv_exact}
),
vec_ann AS (
    SELECT m.id, m.embedding <=> CAST(:q AS halfvec(384)) AS dist
    FROM memories m
    WHERE {where_unindexed} AND NOT CAST(:small AS boolean)
    ORDER BY m.embedding <=> CAST(:q AS halfvec(384))
    LIMIT {kv}
),
-- Each list's places are given in Python, from the scores (`_ranked`).
vec AS MATERIALIZED (
    SELECT * FROM vec_exact UNION ALL SELECT * FROM vec_ann
)
-- A FULL JOIN can only be hashed or merged: the planner, which guesses 10 rows for the
-- unnested text list, otherwise joined it in a nested loop (12,000 comparisons, ~2 ms).
SELECT {columns}, 1 - vec.dist AS vector_similarity,
       txt.score AS text_score, txt.day_only AS text_day_only,
       m.version = txt.version AS text_current, 1 - m.text_dist AS text_row_similarity
FROM vec FULL JOIN txt ON txt.id = vec.id
-- Each listed row by its id, and the filter again for the text list's rows (the text
-- statement ran in an earlier snapshot: a row may have been archived, expired or moved
-- since). LATERAL, kept a subquery by OFFSET 0, and an id that only ix_memories_id
-- matches (the tenant is among the unindexed filters) leave this one plan. A generic
-- plan sizes "one tenant" from statistics, and where they made it a row or two (a table
-- not yet analysed, or many small tenants) a plain join scanned the whole tenant for the
-- join (27 ms at 2,000 rows), and a lookup through the primary key tied with
-- ix_memories_tenant_category, which reads the tenant's entries for every row.
-- A text list row changed since it was scored is left out unless the vector list has it
-- too; one the vector list lacks gets its similarity, in case the HNSW scan missed it
-- (see app/search/list_ranks.py).
CROSS JOIN LATERAL (
    SELECT {columns}, m.version,
           CASE WHEN vec.id IS NULL THEN m.embedding <=> CAST(:q AS halfvec(384)) END
             AS text_dist
    FROM memories m
    WHERE m.id = coalesce(vec.id, txt.id) AND {where_unindexed}
      AND (vec.id IS NOT NULL OR m.version = txt.version)
    OFFSET 0
) m
"""

# One branch of the large scope's match: `keys`, full-text index keys of the scope.
_RARE_TERM_ROWS = """SELECT m.id, m.tsv, m.version FROM memories m
     WHERE {where_unindexed} AND NOT (SELECT yes FROM small)
       AND m.tsv @@ (SELECT q FROM rare_terms) AND {keys}"""

# A one-time SQL condition of the text statement: the tenant holds at least
# `text_keyless_share` of the table's rows (its counted rows against the planner's
# estimate of the table; false while that is unknown). See `_rare_term_keys`.
_TENANT_HOLDS_MOST = """coalesce((SELECT df FROM tenant_stats WHERE lexeme = '')
         >= CAST(:keyless_share AS float8) * nullif((SELECT n FROM index_size), 0), false)"""

# Also N and the average length, used as BM25's statistics when the set is small; and for
# a larger scope named by a scope column, an upper bound of its rows (see `_counted`).
_SMALL_COUNTED = """small AS MATERIALIZED (
    SELECT count(*) < {exact_below} AND NOT {known_large} AS yes,
           greatest(count(*), 1)::float8 AS n,
           greatest(coalesce(avg(length(s.tsv)), 1), 1)::float8 AS avgdl,
           CASE WHEN count(*) >= {exact_below} OR {known_large} THEN {counted} END AS counted
    FROM (SELECT m.tsv FROM memories m WHERE {where} AND NOT {known_large}
          LIMIT {exact_below}) s
)"""
# The tenant's active rows under the term_stats keys in the parameter `keys` (a tag's, a
# category's, a user's: migrations 0009, 0013), summed: a few index entries.
_KEYS_ROWS = """(SELECT coalesce(sum(s.df), 0)::float8 FROM term_stats s
               WHERE s.tenant_id = :tenant_id AND s.lexeme = ANY(CAST(:{keys} AS text[])))"""
_SCOPE_COUNTED = """(SELECT count(*)::float8 FROM (
               SELECT 1 FROM memories m WHERE {scope_keys}
               LIMIT (SELECT cap FROM index_size)) c)"""
# The share of the tenant's rows a user's scope holds, where its rows are fewer than the
# cap (see `_scope_share`); else 1.
_USER_SHARE = """CASE WHEN (SELECT counted FROM small) < (SELECT cap FROM index_size)
         THEN least(1, (SELECT counted FROM small)
                       / greatest((SELECT df FROM tenant_stats WHERE lexeme = ''), 1))
         ELSE 1 END"""
_SMALL_FROM_STATS = """small AS MATERIALIZED (
    SELECT coalesce(sum(df), 0) < {exact_below} AS yes,
           greatest(coalesce(sum(df), 0), 1)::float8 AS n,
           greatest(coalesce(sum(total_len), 0) / greatest(coalesce(sum(df), 0), 1), 1)::float8
             AS avgdl, NULL::float8 AS counted
    FROM term_stats WHERE tenant_id = :tenant_id AND lexeme = ''
)"""

# The answer's columns, then what only the pipeline reads: a summary's covered days.
_COLUMNS = f"{ANSWER_SQL}, m.covered_days"
_ID, _IMPORTANCE, _CREATED_AT, _FACT_ROLE, _SUMMARY_OF = (
    ANSWER_KEYS.index(k) for k in ("id", "importance", "created_at", "fact_role", "summary_of")
)


_NAMED_PARAMETER = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


@functools.lru_cache(maxsize=256)
def _positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """`:name` parameters -> asyncpg's `$n`, and the names in order. Cached: the texts
    are few (one per filter combination and limits), the statement ~6 KB."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    return _NAMED_PARAMETER.sub(number, sql), tuple(names)


# A tag filter through ix_memories_tenant_tags (migrations 0008, 0011), partial on rows
# with tags; its match implies both the tags and the tenant.
_TENANT_TAGS_MATCH = ("cardinality(m.tags) > 0 AND tenant_tags(m.tenant_id, m.tags)"
                      " @> tenant_tags(CAST(:tenant_id AS uuid), CAST(:tags AS text[]))")


def _tags_lead(filters: SearchFilter) -> bool:
    """Tags and no scope column: the tags' index is the way into the tenant's rows."""
    return bool(filters.tags) and not filters.scoped()


class SearchRepository:
    def __init__(self, db: Fetcher, tenant_id: uuid.UUID) -> None:
        self.db = db
        self.tenant_id = tenant_id

    def _where(self, filters: SearchFilter, params: dict[str, Any], *, indexed: bool) -> str:
        """The shared filter. With `indexed=False` every predicate a btree or GIN index
        could serve is wrapped in coalesce(), which no index matches: the planner then
        has one way to run the branch (the tsv index plus a filter, or rows found by key),
        even in a generic plan, where a scope's size is unknown."""

        def pred(sql: str) -> str:
            return sql if indexed else f"coalesce({sql}, false)"

        # With tags and no scope column, the tags' index (keyed by tenant) is the way in:
        # a tenant-led btree, which a generic plan ANDs in when the table holds many
        # tenants, would read every entry of the tenant. With a scope column, its btree
        # is (it reads only the scope), and the tags a plain filter on its rows: the plan
        # kept that btree anyway, and tenant_tags() evaluated on each of a 10k-row user's
        # rows took the text statement from 9 to 48 ms.
        by_tags = indexed and _tags_lead(filters)
        tenant = "m.tenant_id = :tenant_id"
        preds = [
            f"coalesce({tenant}, false)" if by_tags else pred(tenant),
            # Literal in both forms: the partial HNSW index requires it.
            "m.archived_at IS NULL",
            LIVE_SQL,
        ]
        for column in SCOPE_COLUMNS:
            value = getattr(filters, column)
            if value is not None:
                preds.append(pred(f"m.{column} = :{column}"))
                params[column] = value
        if filters.tags:
            preds.append(_TENANT_TAGS_MATCH if by_tags
                         else pred("m.tags @> CAST(:tags AS text[])"))
            params["tags"] = list(filters.tags)
        if filters.categories:
            preds.append(pred("m.category = ANY(CAST(:categories AS text[]))"))
            params["categories"] = list(filters.categories)
        # Indexed where a narrow window or value would otherwise be found by reading the
        # scope: the scope btrees end in created_at, and ix_memories_metadata serves `@>`
        # (bench/search_filters.py).
        if filters.created_after is not None or filters.created_before is not None:
            # Both bounds, an open one infinite (asyncpg sends the naive datetime.min and
            # .max as -infinity and infinity): a generic plan takes a one-sided bound for
            # a third of the rows, and counted a recent window's rows by reading the heap
            # from its oldest end (35 ms at 100k), where a range is taken for narrow and
            # read from the created_at btrees.
            preds.append(pred("m.created_at > :created_after"))
            preds.append(pred("m.created_at < :created_before"))
            params["created_after"] = filters.created_after or datetime.min
            params["created_before"] = filters.created_before or datetime.max
        if filters.metadata:
            preds.append(pred("m.metadata @> CAST(:metadata AS jsonb)"))
            params["metadata"] = json.dumps(filters.metadata)
        if not filters.include_summaries:
            preds.append("m.fact_role = 'fact'")
        return " AND ".join(preds)

    def _rare_term_keys(self, filters: SearchFilter, params: dict[str, Any]) -> list[str]:
        """The scope as full-text index keys, so that GIN drops the other scopes' rows
        before the heap is read; one entry per branch of the match (ANDed predicates),
        their rows disjoint. The plain predicates of `_where` still decide which rows
        qualify.

        ix_memories_tsv_scope's expression keys (migrations 0005, 0012): the tenant/user
        pair for a user's scope, else the tenant. Only that index matches these
        expressions, so a generic plan cannot trade it for a scope btree, which would read
        every row of a large scope. The narrower keys imply the tenant, whose own key is
        left out beside them: GIN intersects every key's postings, and with the tenant's
        (every row of it) a 10k-row user's rare-term branch took 1.9 ms at 100k, 1.3
        without.

        With categories, a branch per category, keyed by tenant/category (and the
        tenant/user pair), where through the tenant's keys every rare-term row was read
        to check its category (a 17% category: ~2,800 rows read for 500 kept, 3 ms at
        100k). Not one branch with the keys in an `IN` (an array, which GIN cannot search
        natively: the plan kept the tenant's keys whenever there were two) nor an OR of
        the branches (PostgreSQL factors the terms' match out of it, and the plan then
        read every tenant's rows holding the terms).

        The whole tenant by its key, unless it holds most of the table
        (`text_keyless_share`): there the key drops few rows, and GIN still read all of
        its postings to intersect them with the terms' (at 100k rows in one tenant, a
        term in 6,605 rows: 2.0 ms through both keys, 0.9 by the term alone), so the
        terms alone find the rows and the tenant is checked on the heap, which then
        reads at most 1/share rows per row kept. Two branches, of which the one-time
        condition runs one.

        With tags and no scope column, the tags' keys in ix_memories_tenant_tags, whose
        second column is `tsv` (migration 0011): GIN intersects the tags with the rare
        terms (an 18% tag: ~2,700 rows read for 500 kept through the tenant's keys, 5 ms
        at 100k)."""
        if _tags_lead(filters):
            params["tags"] = list(filters.tags or ())
            return [_TENANT_TAGS_MATCH]
        user = []
        if filters.user_id is not None:
            params["user_key"] = f"{self.tenant_id}/{filters.user_id}"
            user.append("(m.tenant_id::text || '/' || m.user_id) = :user_key")
        if not filters.categories:
            if user:
                return user
            params["tenant_key"] = str(self.tenant_id)
            return [f"(m.tenant_id::text) = :tenant_key AND NOT {_TENANT_HOLDS_MOST}",
                    _TENANT_HOLDS_MOST]
        branches = []
        for i, category in enumerate(dict.fromkeys(filters.categories)):
            params[f"category_key_{i}"] = f"{self.tenant_id}/{category}"
            branches.append(" AND ".join(
                [f"(m.tenant_id::text || '/' || m.category) = :category_key_{i}", *user]))
        return branches

    @staticmethod
    def _known_large(filters: SearchFilter, params: dict[str, Any], exact_below: int) -> str:
        """An SQL boolean: the scope is known to hold at least `exact_below` rows without
        reading them; "false" where that is not known. A user alone, one tag, or
        categories, and nothing else narrowing: their counts in term_stats are the
        scope's rows, expired ones not yet purged aside (reading 1,000 rows of an 18% tag
        to learn it took 3.6-4 ms of its 8 ms statement). The counts hold summaries, and
        only a user's rows, one tag's or the categories' (a row has one, so their counts
        add up) are the scope exactly; two tags' rows are their intersection, a user's
        with a tag an unknown part of both."""
        if (not filters.include_summaries or filters.scoped_beyond_user()
                or filters.uncounted()):
            return "false"
        if filters.user_id is not None:
            if filters.tags or filters.categories:
                return "false"
            params["large_keys"] = [USER_KEY + filters.user_id]
        elif filters.tags and len(filters.tags) == 1 and not filters.categories:
            params["large_keys"] = [TAG_KEY + filters.tags[0]]
        elif filters.categories and not filters.tags:
            params["large_keys"] = [CATEGORY_KEY + c for c in filters.categories]
        else:
            return "false"
        return f"({_KEYS_ROWS.format(keys='large_keys')} >= {exact_below})"

    @staticmethod
    def _scope_share(filters: SearchFilter) -> str:
        """What share of the tenant's term postings the text index's keys can leave: a
        user's rows over the tenant's, when the user is the only scope column (the
        count is then of the rows those keys select, archived ones aside; an agent,
        session or namespace is checked on the heap, after the index). A term frequent
        in the tenant is then still used to find rows in a user's scope where it is
        rare: otherwise, in a tenant of millions, every word in more than `text_max_df`
        of its rows found nothing for any user. A user of at least the cap's rows, or
        none: 1, the tenant's frequencies as they are (for a big user the wider match
        cost more than it found, see the README)."""
        return (_USER_SHARE if filters.user_id is not None and not filters.scoped_beyond_user()
                else "1")

    @staticmethod
    def _filter_rows(filters: SearchFilter, params: dict[str, Any]) -> str:
        """An upper bound of the rows the tag and category filters leave, from the
        tenant's counts in term_stats (migration 0009): the rarest tag's rows (all must
        match), the categories' rows summed (any may). A GIN index cannot count a tag's
        rows without reading them, and a tag held by 1.5% of the tenant went through
        HNSW (11-13 ms) where ranking its rows exactly takes 2. NULL without either."""
        bounds = []
        if filters.tags:
            params["tag_keys"] = [TAG_KEY + t for t in filters.tags]
            bounds.append(
                "(SELECT min(n) FROM (SELECT coalesce(sum(s.df), 0)::float8 AS n"
                " FROM unnest(CAST(:tag_keys AS text[])) AS k(key)"
                " LEFT JOIN term_stats s ON s.tenant_id = :tenant_id AND s.lexeme = k.key"
                " GROUP BY k.key) t)")
        if filters.categories:
            params["category_keys"] = [CATEGORY_KEY + c for c in filters.categories]
            bounds.append(_KEYS_ROWS.format(keys="category_keys"))
        return f"least({', '.join(bounds)})" if bounds else "NULL::float8"

    @staticmethod
    def _scope_keys(filters: SearchFilter) -> str | None:
        """The scope columns alone (tenant and user, agent, session, namespace): what the
        scope btrees (tenant_id, column, created_at, id) hold, so its rows can be counted
        without reading the heap. None when no scope column narrows the search (the
        tenant's rows are known from term_stats). The parameters are `_where`'s."""
        keys = [f"m.{c} = :{c}" for c in SCOPE_COLUMNS if getattr(filters, c) is not None]
        return " AND ".join(["m.tenant_id = :tenant_id", *keys]) if keys else None

    def _counted(self, filters: SearchFilter, params: dict[str, Any]) -> str:
        """An SQL upper bound of the scope's rows, as far as the scope columns tell: a
        user's count in term_stats when the user is the only one (where counting the
        user's btree up to the cap read ~4,200 entries at 100k rows), else the scope's
        btree entries counted up to the cap (archived ones too); NULL without a scope
        column."""
        if filters.user_id is not None and not filters.scoped_beyond_user():
            params["user_keys"] = [USER_KEY + filters.user_id]
            return _KEYS_ROWS.format(keys="user_keys")
        scope_keys = self._scope_keys(filters)
        return ("NULL::float8" if scope_keys is None
                else _SCOPE_COUNTED.format(scope_keys=scope_keys))

    def _sizes(self, limits: RetrievalLimits, top_k: int) -> dict[str, int]:
        # Written into the statement: as parameters, a generic plan would assume a LIMIT of
        # a tenth of the table and join accordingly. The vector list is at least top_k
        # deep (so a query no row matches lexically still fills the answer), rounded up
        # to a few depths so the statements to prepare stay few; through HNSW (`kv`, also
        # the depth the exact/HNSW crossover is costed at) no deeper than hnsw_candidates.
        def depth(candidates: int) -> int:
            d = max(candidates, top_k)
            return int(next((step for step in (20, 50, 100) if d <= step), d))

        return {"kv": depth(min(limits.hnsw_candidates, limits.vector_candidates)),
                "kv_exact": depth(limits.vector_candidates),
                "kt": int(limits.text_candidates),
                "exact_below": int(limits.exact_below),
                "text_match_cap": int(limits.text_match_cap)}

    async def _fetch(self, template: str, filters: SearchFilter, params: dict[str, Any],
                     sizes: dict[str, int], *, probe: bool = False) -> Sequence[Sequence[Any]]:
        """`template` filled in and run; `probe`: it holds the `small` scope-size probe
        (the text statement; the vector statement gets the probe's answer)."""
        where = self._where(filters, params, indexed=True)
        where_unindexed = self._where(filters, params, indexed=False)
        small = rows = ""
        share, filter_rows = "1", "NULL::float8"
        if probe:
            counted = self._counted(filters, params)
            known_large = self._known_large(filters, params, sizes["exact_below"])
            small = (_SMALL_COUNTED if filters.narrows() else _SMALL_FROM_STATS).format(
                where=where, counted=counted, known_large=known_large, **sizes)
            rows = " UNION ALL ".join(
                _RARE_TERM_ROWS.format(where_unindexed=where_unindexed, keys=keys)
                for keys in self._rare_term_keys(filters, params))
            share = self._scope_share(filters)
            filter_rows = self._filter_rows(filters, params)
        sql = template.format(small=small, where=where, **sizes, columns=_COLUMNS,
                              where_unindexed=where_unindexed,
                              rare_term_rows=rows, scope_share=share,
                              filter_rows=filter_rows)
        statement, names = _positional(sql)
        return await self.db.fetch(statement, *(params[name] for name in names))

    async def text_matches(self, query_text: str, filters: SearchFilter,
                           limits: RetrievalLimits) -> TextMatches:
        """The BM25 list, best first. It needs no query vector, so it can run while the
        query is being embedded."""
        params: dict[str, Any] = {
            "tenant_id": self.tenant_id,
            "qtext": query_text,
            "text_max_df": limits.text_max_df,
            "common_share": limits.text_common_share,
            "keyless_share": limits.text_keyless_share,
            "k1": limits.bm25_k1,
            "b": limits.bm25_b,
            "exact_cost_ratio": limits.exact_cost_ratio,
        }
        ((small, ids, scores, day_only, versions, scope_rows, index_rows),) = (
            await self._fetch(_TEXT_SQL, filters, params, self._sizes(limits, 0), probe=True))
        return TextMatches(small=small, ids=tuple(ids), scores=tuple(scores),
                           day_only=tuple(day_only), versions=tuple(versions),
                           scope_rows=scope_rows, index_rows=index_rows or 0.0)

    async def candidates(
        self,
        text: TextMatches,
        query_vector: Sequence[float],
        filters: SearchFilter,
        limits: RetrievalLimits,
        top_k: int = 0,
    ) -> list[RetrievedRow]:
        """The vector list, and the rows of both lists with their ranks and scores."""
        sizes = self._sizes(limits, top_k)
        exact = text.small or prefers_exact(text.scope_rows, text.index_rows, sizes["kv"],
                                            limits.exact_cost_ratio)
        params: dict[str, Any] = {
            "tenant_id": self.tenant_id,
            "q": vector_text(query_vector),
            "small": exact,
            "text_ids": list(text.ids),
            "text_scores": list(text.scores),
            "text_day_only": list(text.day_only) or [False] * len(text.ids),
            "text_versions": list(text.versions),
        }
        result = await self._fetch(_VECTOR_SQL, filters, params, sizes)
        # By position (see `_ranked`): the memory's columns, then its vector similarity.
        n = len(ANSWER_KEYS)
        if not exact and sum(row[n + 1] is not None for row in result) < sizes["kv"]:
            # A filtered HNSW scan gives up after hnsw.max_scan_tuples, so a scope that is
            # a sliver of the index can come back short. The exact ranking always fills;
            # it costs a second statement, only then.
            params["small"] = True
            result = await self._fetch(_VECTOR_SQL, filters, params, sizes)
        return _ranked(result, n)


def _ranked(result: Sequence[Sequence[Any]], n: int) -> list[RetrievedRow]:
    """The vector statement's rows, placed in each list by their scores (see
    app/search/list_ranks.py). By position, as in _VECTOR_SQL: the memory's columns, its
    covered days, its similarity in the vector list and its score in the text list (null
    where a list lacks it), the day-only flag, whether the row is as the text list scored
    it, and the similarity of a text list row the vector list lacks."""
    listed = {row[_ID]: row[n + 1] for row in result if row[n + 1] is not None}
    computed = {row[_ID]: row[n + 5] for row in result
                if row[n + 1] is None and row[n + 4] and row[n + 5] is not None}
    texts = {row[_ID]: row[n + 2] for row in result if row[n + 2] is not None and row[n + 4]}
    vector_ranks = shared_places(with_rows_missed(listed, computed))
    text_ranks = shared_places(texts)
    # Every similarity computed is kept, placed in the vector list or not: explain showed
    # none for a text-only row though it had been computed (an exploratory probe).
    similarities = {**computed, **listed}
    return [
        RetrievedRow(row[_ID], row[_IMPORTANCE], row[_CREATED_AT], row[_FACT_ROLE],
                     row[:n], vector_ranks.get(row[_ID]), similarities.get(row[_ID]),
                     text_ranks.get(row[_ID]), texts.get(row[_ID]),
                     tuple(row[n]) if row[n] else (),
                     tuple(row[_SUMMARY_OF]) if row[_SUMMARY_OF] else (),
                     bool(row[n + 3]) and row[_ID] in texts)
        for row in result
    ]
