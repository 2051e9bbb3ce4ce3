import pytest

from intervals.interval import Interval
from intervals.ops import gaps, intersection, merge, total_length


def test_reversed_bounds_are_rejected():
    with pytest.raises(ValueError):
        Interval(3, 1)


def test_ordinary_bounds_are_accepted():
    interval = Interval(1, 5)
    assert (interval.lo, interval.hi) == (1, 5)


def test_a_point_is_an_interval():
    assert Interval(2, 2).length() == 0


def test_length():
    assert Interval(1, 4).length() == 3


def test_contains_an_inner_point():
    assert Interval(0, 10).contains(5)


def test_contains_both_ends():
    assert Interval(0, 10).contains(0)
    assert Interval(0, 10).contains(10)


def test_contains_nothing_outside():
    assert not Interval(0, 10).contains(-1)
    assert not Interval(0, 10).contains(11)


def test_overlapping_and_touching_intervals_overlap():
    assert Interval(0, 5).overlaps(Interval(3, 9))
    assert Interval(0, 5).overlaps(Interval(5, 9))
    assert Interval(0, 10).overlaps(Interval(2, 3))


def test_disjoint_intervals_do_not_overlap():
    assert not Interval(0, 1).overlaps(Interval(5, 6))
    assert not Interval(5, 6).overlaps(Interval(0, 1))


def test_clamp_raises_points_below():
    assert Interval(0, 10).clamp(-3) == 0


def test_clamp_lowers_points_above():
    assert Interval(0, 10).clamp(12) == 10


def test_clamp_keeps_points_inside():
    assert Interval(0, 10).clamp(5) == 5
    assert Interval(0, 10).clamp(0) == 0
    assert Interval(0, 10).clamp(10) == 10


def test_repr_equality_and_hash():
    assert repr(Interval(1, 2)) == "Interval(1, 2)"
    assert Interval(1, 2) == Interval(1, 2)
    assert Interval(1, 2) != Interval(1, 3)
    assert hash(Interval(1, 2)) == hash(Interval(1, 2))


def test_merge_overlapping():
    merged = merge([Interval(5, 8), Interval(1, 3), Interval(2, 4)])
    assert merged == [Interval(1, 4), Interval(5, 8)]


def test_merge_touching():
    assert merge([Interval(1, 3), Interval(3, 5)]) == [Interval(1, 5)]


def test_merge_nested_and_empty():
    assert merge([Interval(1, 10), Interval(2, 3)]) == [Interval(1, 10)]
    assert merge([]) == []


def test_intersection_of_overlapping_intervals():
    assert intersection(Interval(0, 5), Interval(3, 9)) == Interval(3, 5)


def test_intersection_of_touching_intervals_is_a_point():
    assert intersection(Interval(0, 5), Interval(5, 9)) == Interval(5, 5)


def test_intersection_of_disjoint_intervals_is_none():
    assert intersection(Interval(0, 1), Interval(2, 3)) is None


def test_total_length():
    assert total_length([Interval(0, 2), Interval(1, 4), Interval(10, 11)]) == 5


def test_gaps_between_intervals():
    found = gaps([Interval(2, 3), Interval(5, 6)], Interval(0, 10))
    assert found == [Interval(0, 2), Interval(3, 5), Interval(6, 10)]


def test_gaps_of_nothing_and_of_everything():
    assert gaps([], Interval(0, 1)) == [Interval(0, 1)]
    assert gaps([Interval(0, 10)], Interval(2, 3)) == []


def test_reported_behaviour():
    from intervals.ops import Interval, merge

    assert repr(merge([Interval(1, 3), Interval(3, 5)])) == '[Interval(1, 5)]'
