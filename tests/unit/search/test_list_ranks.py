"""Places in the candidate lists: tied rows share the mean of their places, and rows an
approximate scan missed join the vector list."""

from __future__ import annotations

from app.search.list_ranks import shared_places, with_rows_missed


def test_places_go_highest_score_first() -> None:
    assert shared_places({"a": 0.2, "b": 0.9, "c": 0.5}) == {"b": 1, "c": 2, "a": 3}


def test_equal_scores_share_the_mean_of_their_places() -> None:
    assert shared_places({"a": 0.7, "b": 0.7, "c": 0.1, "d": 0.9}) == {
        "d": 1, "a": 2.5, "b": 2.5, "c": 4}
    assert shared_places({"a": 0.5, "b": 0.5, "c": 0.5}) == {"a": 2, "b": 2, "c": 2}


def test_what_the_places_add_up_to_is_kept() -> None:
    scores = {i: float(i // 3) for i in range(10)}
    assert sum(shared_places(scores).values()) == sum(range(1, 11))


def test_a_whole_place_is_an_int() -> None:
    places = shared_places({"a": 0.5, "b": 0.5, "c": 0.5, "d": 0.1})
    assert [type(places[k]) for k in "abcd"] == [int] * 4


def test_no_scores_no_places() -> None:
    assert shared_places({}) == {}


def test_a_row_nearer_than_the_lists_farthest_joins_it() -> None:
    listed = {"a": 0.45, "b": 0.42}
    assert with_rows_missed(listed, {"x": 0.50, "y": 0.42, "z": 0.41}) == {
        "a": 0.45, "b": 0.42, "x": 0.50, "y": 0.42}
    assert shared_places(with_rows_missed(listed, {"x": 0.50})) == {"x": 1, "a": 2, "b": 3}


def test_an_empty_list_takes_no_one_and_a_listed_row_keeps_its_similarity() -> None:
    assert with_rows_missed({}, {"x": 0.9}) == {}
    assert with_rows_missed({"a": 0.3}, {"a": 0.9}) == {"a": 0.3}
