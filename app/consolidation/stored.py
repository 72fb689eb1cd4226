"""Reading a run's stored request and composition across versions of the service.

A run stores its request and composition as JSON, every field included, and the models
refuse fields they do not know (a client's typo must be a 422). During a rolling deploy
an older replica then meets runs written by a newer one whose models gained a field:
it could neither show them (GET answered 500, and one such run broke the whole listing)
nor run a queued one. Here the fields a model does not know are set aside instead:

- to show a run, they are left out (the replica cannot name what it does not know);
- to run a queued one, they are not: running it without them would do something else
  than was asked (a dropped filter folds more memories), so the job waits for a
  replica that knows them (`NewerRun`).

Fields that a newer version removed or narrowed are the other direction; the migration
that makes such a change rewrites the stored runs (tests/unit/consolidation/
test_stored_runs.py keeps runs as this version writes them readable).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from app.consolidation.schemas import ConsolidationComposition, ConsolidationRequest
from app.errors import sent_path

M = TypeVar("M", bound=BaseModel)


class NewerRun(Exception):
    """A stored run carries fields this version does not know: a newer one wrote it."""

    def __init__(self, fields: list[str]) -> None:
        super().__init__(", ".join(fields))
        self.fields = fields


@dataclass(frozen=True)
class Lenient(Generic[M]):
    value: M
    # Dotted paths of the fields set aside.
    unknown: list[str]


def read_lenient(model: type[M], raw: Any) -> Lenient[M]:
    """`raw` as `model`, the fields it does not know set aside; a ValidationError for
    any other mismatch."""
    try:
        return Lenient(model.model_validate(raw), [])
    except ValidationError as exc:
        errors = exc.errors()
        if not errors or any(e["type"] != "extra_forbidden" for e in errors):
            raise
        pruned = copy.deepcopy(raw)
        for error in errors:
            _remove(pruned, error["loc"])
        return Lenient(model.model_validate(pruned),
                       [".".join(map(str, sent_path(e["loc"], raw))) for e in errors])


def _remove(node: Any, loc: tuple[int | str, ...]) -> None:
    """Delete the field at pydantic's `loc` (which also names the tag of each tagged
    union on the way, where the JSON has no such key)."""
    *path, last = sent_path(loc, node)
    for part in path:
        node = node[part]
    if isinstance(node, dict):
        node.pop(last, None)


def request_to_show(raw: Any) -> ConsolidationRequest:
    return read_lenient(ConsolidationRequest, raw).value


def composition_to_show(raw: Any) -> ConsolidationComposition:
    return read_lenient(ConsolidationComposition, raw).value


def request_to_run(raw: Any) -> ConsolidationRequest:
    """The stored request, exactly; NewerRun when it carries fields this version does
    not know."""
    read = read_lenient(ConsolidationRequest, raw)
    if read.unknown:
        raise NewerRun(read.unknown)
    return read.value
