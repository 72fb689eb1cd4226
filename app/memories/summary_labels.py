"""What a summary says of its sources beside their text: the tags and metadata they all
share and their category. A change of a source's labels can make that untrue."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Labels:
    tags: tuple[str, ...]
    category: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


def still_said(summary: Labels, before: Labels, after: Labels) -> bool:
    """Whether `summary`, built from a memory (or from a summary of it in turn), says
    nothing of it that its change from `before` to `after` made untrue: a tag the
    memory lost, a metadata value it no longer holds, the category it left. A filter on
    one of those would find the summary, with the memory's text in it."""
    if set(summary.tags) & (set(before.tags) - set(after.tags)):
        return False
    for key, value in summary.metadata.items():
        held = key in before.metadata and same_json(before.metadata[key], value)
        if held and not (key in after.metadata and same_json(after.metadata[key], value)):
            return False
    return not (summary.category == before.category != after.category)


def same_json(a: Any, b: Any) -> bool:
    """JSON equality, as jsonb's: Python's == takes true for 1 (and 1 for 1.0, which jsonb
    also does)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_json, a, b))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and bool(a == b)
