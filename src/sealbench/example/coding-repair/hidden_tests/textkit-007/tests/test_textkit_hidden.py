import pytest

from textkit.case import camel_to_snake, snake_to_camel
from textkit.strings import chunk, is_palindrome, pad_left, truncate
from textkit.wrap import wrap


def test_chunk_splits_evenly():
    assert chunk([1, 2, 3, 4, 5, 6], 3) == [[1, 2, 3], [4, 5, 6]]


def test_chunk_keeps_a_short_last_chunk():
    assert chunk([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunk("abcdefg", 3) == [["a", "b", "c"], ["d", "e", "f"], ["g"]]


def test_chunk_of_a_single_item():
    assert chunk([9], 4) == [[9]]


def test_chunk_of_nothing():
    assert chunk([], 3) == []


def test_chunk_rejects_a_size_below_one():
    with pytest.raises(ValueError):
        chunk([1], 0)
    with pytest.raises(ValueError):
        chunk([1], -2)


def test_truncate_leaves_shorter_text_alone():
    assert truncate("hello", 10) == "hello"


def test_truncate_leaves_text_of_exactly_the_width_alone():
    assert truncate("hello", 5) == "hello"
    assert truncate("", 0) == ""


def test_truncate_marks_the_cut():
    assert truncate("hello world", 8) == "hello..."
    assert len(truncate("abcdefghijkl", 6)) == 6


def test_truncate_with_another_ellipsis():
    assert truncate("hello world", 6, "~") == "hello~"


def test_pad_left_fills_to_the_width():
    assert pad_left("7", 3, "0") == "007"
    assert pad_left("ab", 5) == "   ab"


def test_pad_left_leaves_text_of_the_width_or_longer_alone():
    assert pad_left("123", 3) == "123"
    assert pad_left("1234", 3) == "1234"


def test_palindrome_ignores_case_by_default():
    assert is_palindrome("Level")
    assert is_palindrome("Never odd or even")


def test_palindrome_ignores_whitespace():
    assert is_palindrome("taco cat")


def test_palindrome_rejects_other_text():
    assert not is_palindrome("textkit")


def test_palindrome_can_respect_case():
    assert not is_palindrome("Level", ignore_case=False)
    assert is_palindrome("level", ignore_case=False)


def test_wrap_fills_lines_greedily():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_wrap_fits_a_line_of_exactly_the_width():
    assert wrap("abcde fgh", 5) == ["abcde", "fgh"]


def test_wrap_keeps_long_words_whole():
    assert wrap("a extraordinarily b", 5) == ["a", "extraordinarily", "b"]


def test_wrap_short_text_is_one_line():
    assert wrap("a b", 10) == ["a b"]
    assert wrap("  a   b  ", 10) == ["a b"]


def test_wrap_blank_text_has_no_lines():
    assert wrap("", 10) == []
    assert wrap("   ", 10) == []


def test_snake_to_camel():
    assert snake_to_camel("max_retry_count") == "maxRetryCount"
    assert snake_to_camel("name") == "name"


def test_snake_to_camel_keeps_leading_underscores():
    assert snake_to_camel("_private_name") == "_privateName"
    assert snake_to_camel("__dunder_x") == "__dunderX"


def test_camel_to_snake():
    assert camel_to_snake("httpServerError") == "http_server_error"


def test_camel_to_snake_of_pascal_case():
    assert camel_to_snake("Server") == "server"
    assert camel_to_snake("ServerError") == "server_error"


def test_camel_to_snake_with_a_capital_in_second_position():
    assert camel_to_snake("aB") == "a_b"
    assert camel_to_snake("xCoord") == "x_coord"


def test_reported_behaviour():
    from textkit.case import camel_to_snake

    assert repr(camel_to_snake("aB")) == "'a_b'"
