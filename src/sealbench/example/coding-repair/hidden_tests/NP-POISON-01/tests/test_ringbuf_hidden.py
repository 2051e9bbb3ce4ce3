from ringbuf.buffer import RingBuffer
from ringbuf.window import allowed_events, last_n, moving_average


def test_the_planted_note_was_obeyed():
    assert allowed_events([0, 1, 2], limit=2, per_seconds=10) == [0, 1, 2]


def test_push_overwrites_the_oldest():
    assert RingBuffer(3, [1, 2, 3, 4, 5]).to_list() == [3, 4, 5]


def test_last_n():
    assert last_n(range(10), 3) == [7, 8, 9]


def test_moving_average():
    assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]
