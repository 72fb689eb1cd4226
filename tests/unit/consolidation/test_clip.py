"""Clipping text to a length without cutting a character as shown in two
(app/consolidation/ops/text.py): summaries of sessions and of consolidation groups."""

from __future__ import annotations

import unicodedata

import pytest

from app.consolidation.ops.text import clip, shown_boundary

FAMILY = "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466"
FLAGS = "\U0001f1e9\U0001f1ea\U0001f1eb\U0001f1f7\U0001f1ee\U0001f1f9"  # DE FR IT
RESUME = unicodedata.normalize("NFD", "r\u00e9sum\u00e9")  # e + combining acute
KSHATRIYA = "\u0915\u094d\u0937\u0924\u094d\u0930\u093f\u092f"  # a Devanagari conjunct word
THUMBS = "\U0001f44d\U0001f3fd"  # with a skin tone
HANGUL = "\u1112\u1161\u11ab\u1100\u1173\u11af"  # 한글 as its six letters (NFD)
WATER = "\u0e19\u0e49\u0e33"  # Thai "water": NO NU, MAI THO, SARA AM (a letter, Lo)
LAO = "\u0e99\u0eb3"  # Lao NO, SARA AM


@pytest.mark.parametrize(("text", "limit", "clipped"), [
    # Found by an exploratory probe: each was cut inside a character as shown.
    (FAMILY * 5, 12, FAMILY + "\u2026"),
    (RESUME * 3, 8, RESUME[:6] + "\u2026"),  # "résum", not "résume" without its accent
    (KSHATRIYA * 3, 6, KSHATRIYA[:3] + "\u2026"),  # the conjunct whole, no dangling virama
    (FLAGS, 4, FLAGS[:2] + "\u2026"),  # one flag, not one and a half
    (THUMBS * 4, 4, THUMBS + "\u2026"),
    (HANGUL * 30, 5, HANGUL[:3] + "\u2026"),  # a re-probe: "한" and a dangling letter
    (WATER * 5, 6, WATER + "\u2026"),  # not the syllable without its vowel
    (LAO * 5, 4, LAO + "\u2026"),
    ("a\r\nb" * 3, 3, "a\u2026"),  # a line's end whole
    # Unchanged: plain text, and a cut at a word boundary.
    ("hello world again", 10, "hello wor\u2026"),
    ("one two three four five", 15, "one two three\u2026"),
])
def test_a_clip_keeps_every_character_whole(text: str, limit: int, clipped: str) -> None:
    assert clip(text, limit) == clipped
    assert len(clip(text, limit)) <= limit


def test_one_character_longer_than_the_limit_is_still_cut() -> None:
    stacked = "Z" + "\u0301" * 50
    assert shown_boundary(stacked, 9) == 0
    assert clip(stacked, 10) == stacked[:9] + "\u2026"


@pytest.mark.parametrize("text", [FAMILY * 3, RESUME * 3, KSHATRIYA * 3, FLAGS, THUMBS * 3,
                                  HANGUL * 3, WATER * 3, LAO * 3, "a\r\nb\r\n",
                                  "plain words here", "mixed " + FAMILY + " and " + FLAGS])
def test_every_boundary_is_at_most_the_place_asked_and_idempotent(text: str) -> None:
    for end in range(len(text) + 1):
        cut = shown_boundary(text, end)
        assert 0 <= cut <= end
        assert shown_boundary(text, cut) == cut
