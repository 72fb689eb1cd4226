"""`still_said`: what a summary says of a memory whose labels changed."""

import pytest

from app.memories.summary_labels import Labels, still_said

BEFORE = Labels(("heron", "confidential"), "proj", {"doc": "heron", "n": 1})


@pytest.mark.parametrize(("summary", "after", "said"), [
    # A tag the memory lost, which the summary carries: untrue.
    (Labels(("heron", "confidential"), "proj"),
     Labels(("heron", "public"), "proj", BEFORE.metadata), False),
    # The same tag lost, but the summary never carried it (another source lacked it).
    (Labels(("heron",), "proj"), Labels(("heron", "public"), "proj", BEFORE.metadata), True),
    # A tag only added.
    (Labels(("heron", "confidential"), "proj"),
     Labels(("heron", "confidential", "reviewed"), "proj", BEFORE.metadata), True),
    # A metadata value changed, or the key dropped, which the summary holds.
    (Labels((), "proj", {"doc": "heron"}), Labels((), "proj", {"doc": "press", "n": 1}), False),
    (Labels((), "proj", {"doc": "heron"}), Labels((), "proj", {"n": 1}), False),
    # Changed, where the summary holds another value of its own (not the memory's).
    (Labels((), "proj", {"doc": "other"}), Labels((), "proj", {"doc": "press"}), True),
    # jsonb's equality: 1 and 1.0 are one value, true is not 1.
    (Labels((), "proj", {"n": 1}), Labels((), "proj", {**BEFORE.metadata, "n": 1.0}), True),
    (Labels((), "proj", {"n": 1}), Labels((), "proj", {**BEFORE.metadata, "n": True}), False),
    # A metadata key only added.
    (Labels((), "proj", {"doc": "heron"}),
     Labels((), "proj", {**BEFORE.metadata, "new": "x"}), True),
    # The category the summary has, left; or one it never had.
    (Labels((), "proj"), Labels((), "press", BEFORE.metadata), False),
    (Labels((), "notes"), Labels((), "press", BEFORE.metadata), True),
    # Nothing changed.
    (Labels(("heron", "confidential"), "proj", {"doc": "heron"}), BEFORE, True),
])
def test_a_summary_still_says_of_a_memory_only_what_its_change_left_true(
    summary: Labels, after: Labels, said: bool,
) -> None:
    assert still_said(summary, BEFORE, after) is said
