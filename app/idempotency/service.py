"""Runs a create at most once per key; replays its stored answer to retries."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeGuard

from pydantic import BaseModel

from app.errors import Conflict, ValidationFailed
from app.idempotency.repository import IdempotencyRepository

HEADER = "Idempotency-Key"
KEY_PATTERN = r"^[\x21-\x7e]{1,255}$"
_KEY = re.compile(KEY_PATTERN)


@dataclass(frozen=True)
class Outcome:
    status_code: int
    body: str
    """The answer's JSON text, as the first request was sent it."""
    replayed: bool


def canonical_body(body: BaseModel) -> dict[str, Any]:
    """What identifies a create's validated body: each field the request sets to other than
    its default. A generated client sends every default (`"importance": 0.5`, `"user_id":
    null`) and a hand-written retry of the same create may not, and the two had hashed
    apart: a 409 for the same request (an exploratory probe). A field added later with a
    default does not change the form of a request that leaves it out."""
    return body.model_dump(mode="json", exclude_defaults=True)


def earlier_body(body: BaseModel) -> dict[str, Any]:
    """The form a create's body was hashed in before 2026-12-01 22:07: the fields the
    request sent, defaults spelt out included. A key stored then, retried after the
    upgrade, is read with it too: it was a 409 for the same request (an upgrade probe).
    (Labels are composed now, as they were not before 0033: a retry of one sent
    decomposed still meets a 409.)"""
    return body.model_dump(mode="json", exclude_unset=True)


def request_hash(operation: str, body: Any) -> bytes:
    canonical = json.dumps([operation, body], sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).digest()


def check_key(key: str) -> str:
    if not _KEY.match(key):
        raise ValidationFailed.on(
            f"header.{HEADER}", "must be 1 to 255 visible ASCII characters"
        )
    return key


# The forms older versions hashed a request in (`earlier_body`), made only when needed.
Earlier = Callable[[], Sequence[Any]] | None


class KeyRecord(Protocol):
    """A key's record, as the session reads it or as a read pool does (StoredKey)."""

    @property
    def operation(self) -> str: ...
    @property
    def request_hash(self) -> bytes: ...
    @property
    def status_code(self) -> int | None: ...
    @property
    def response_body(self) -> str | None: ...
    @property
    def created_at(self) -> datetime: ...


class IdempotencyService:
    def __init__(self, repository: IdempotencyRepository, ttl: timedelta) -> None:
        self.repository = repository
        self.ttl = ttl

    def _live(self, record: KeyRecord | None) -> TypeGuard[KeyRecord]:
        return record is not None and record.created_at >= datetime.now(UTC) - self.ttl

    def replay(self, key: str, record: KeyRecord | None, operation: str,
               digest: bytes, earlier: Earlier = None) -> Outcome | None:
        """The stored answer a request of this hash gets from the key's record, when it
        is live and answered; a Conflict when the key was used with another request.
        `earlier` gives the forms older versions hashed the request in, read only when
        the digest differs."""
        if not self._live(record):
            return None
        if record.operation != operation or (
                record.request_hash != digest and not any(
                    record.request_hash == request_hash(operation, form)
                    for form in (earlier() if earlier is not None else ()))):
            raise Conflict(
                f"{HEADER} {key!r} was already used with a different request; "
                "use a new key for a new request"
            )
        if record.status_code is not None and record.response_body is not None:
            return Outcome(record.status_code, record.response_body, replayed=True)
        return None

    async def answered(self, key: str, operation: str, body: Any,
                       earlier: Earlier = None) -> bool:
        """Whether this request, under `key`, would be answered from the key's record:
        work `run`'s `produce` would not repeat must not be done before it either."""
        record = await self.repository.get(key)
        try:
            return self.replay(key, record, operation, request_hash(operation, body),
                               earlier) is not None
        except Conflict:
            # Another request's key: `run` says so, after what the request does first.
            return False

    async def run(
        self,
        key: str,
        operation: str,
        digest: bytes,
        produce: Callable[[], Awaitable[tuple[int, str, Sequence[str]]]],
        earlier: Earlier = None,
    ) -> Outcome:
        """`produce` makes the answer (status, JSON text, what it names) when the key is
        new; `digest` is the request's `request_hash`."""
        if not await self.repository.claim(key, operation, digest):
            record = await self.repository.get(key)
            if (replayed := self.replay(key, record, operation, digest, earlier)) is not None:
                return replayed
            if record is None:
                await self.repository.claim(key, operation, digest)
            else:
                await self.repository.reclaim(key, operation, digest)
        status_code, response, names = await produce()
        await self.repository.complete(key, status_code, response, names)
        return Outcome(status_code, response, replayed=False)
