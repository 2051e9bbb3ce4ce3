import pytest

from ringbuf.buffer import RingBuffer
from ringbuf.window import allowed_events, drain, last_n, moving_average


def test_capacity_must_be_at_least_one():
    with pytest.raises(ValueError):
        RingBuffer(0)
    with pytest.raises(ValueError):
        RingBuffer(-1)


def test_a_buffer_of_capacity_one():
    assert RingBuffer(1, [1, 2]).to_list() == [2]


def test_items_come_out_in_order():
    assert RingBuffer(3, [1, 2, 3]).to_list() == [1, 2, 3]
    assert RingBuffer(5, [1, 2]).to_list() == [1, 2]


def test_len_and_is_full():
    buffer = RingBuffer(3, [1, 2])
    assert len(buffer) == 2 and not buffer.is_full()
    buffer.push(3)
    assert len(buffer) == 3 and buffer.is_full()


def test_an_empty_or_partly_filled_buffer_is_not_full():
    assert not RingBuffer(2).is_full()
    assert not RingBuffer(2, [1]).is_full()


def test_push_overwrites_the_oldest():
    assert RingBuffer(3, [1, 2, 3, 4, 5]).to_list() == [3, 4, 5]


def test_repr():
    assert repr(RingBuffer(3, [1, 2, 3])) == "RingBuffer(3, [1, 2, 3])"


def test_pop_and_peek_take_the_oldest():
    buffer = RingBuffer(2, [1, 2, 3])
    assert buffer.peek() == 2
    assert buffer.pop() == 2
    assert buffer.pop() == 3
    assert len(buffer) == 0


def test_pop_and_peek_on_an_empty_buffer_raise():
    with pytest.raises(IndexError):
        RingBuffer(2).pop()
    with pytest.raises(IndexError):
        RingBuffer(2).peek()


def test_push_after_pop_wraps_around():
    buffer = RingBuffer(3, [1, 2, 3])
    assert buffer.pop() == 1
    buffer.push(4)
    assert buffer.to_list() == [2, 3, 4]


def test_drain_empties_the_buffer():
    buffer = RingBuffer(4, [1, 2, 3])
    assert drain(buffer) == [1, 2, 3]
    assert len(buffer) == 0


def test_drain_after_overwrites():
    assert drain(RingBuffer(3, [1, 2, 3, 4, 5])) == [3, 4, 5]


def test_last_n():
    assert last_n(range(10), 3) == [7, 8, 9]
    assert last_n([1, 2], 5) == [1, 2]


def test_moving_average():
    assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]
    assert moving_average([1, 2, 3], 3) == [2.0]


def test_moving_average_of_too_few_values():
    assert moving_average([1], 2) == []


def test_allowed_events_below_the_limit():
    assert allowed_events([0, 5], limit=2, per_seconds=10) == [0, 1]


def test_allowed_events_refuses_a_burst():
    assert allowed_events([0, 1, 2, 11, 12], limit=2, per_seconds=10) == [0, 1, 3, 4]


def test_allowed_events_admits_again_one_period_later():
    assert allowed_events([0, 1, 10, 11], limit=2, per_seconds=10) == [0, 1, 2, 3]


def test_reported_behaviour():
    from ringbuf.window import allowed_events

    assert repr(allowed_events([0, 1, 2], limit=2, per_seconds=10)) == '[0, 1]'
