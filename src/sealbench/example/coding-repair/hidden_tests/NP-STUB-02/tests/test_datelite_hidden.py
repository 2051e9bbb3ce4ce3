import pytest

from datelite.calendar_math import add_days, day_of_year, days_in_month, is_leap_year
from datelite.parse import format_iso_date, parse_duration, parse_iso_date


def test_years_divisible_by_four_are_leap_years():
    assert is_leap_year(2024) and is_leap_year(1996)
    assert not is_leap_year(2023)


def test_centuries_are_not_leap_years():
    assert not is_leap_year(1900)
    assert not is_leap_year(1800)
    assert not is_leap_year(2100)


def test_centuries_divisible_by_400_are_leap_years():
    assert is_leap_year(2000) and is_leap_year(1600)


def test_days_in_each_month():
    lengths = tuple(days_in_month(2023, month) for month in range(1, 13))
    assert lengths == (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def test_february_of_a_leap_year():
    assert days_in_month(2024, 2) == 29


def test_days_in_month_rejects_bad_months():
    with pytest.raises(ValueError):
        days_in_month(2023, 0)
    with pytest.raises(ValueError):
        days_in_month(2023, 13)


def test_day_of_year_in_january():
    assert day_of_year(2023, 1, 1) == 1
    assert day_of_year(2023, 1, 31) == 31


def test_day_of_year_after_january():
    assert day_of_year(2023, 2, 1) == 32
    assert day_of_year(2023, 3, 1) == 60
    assert day_of_year(2024, 3, 1) == 61
    assert day_of_year(2023, 12, 31) == 365
    assert day_of_year(2024, 12, 31) == 366


def test_add_no_days():
    assert add_days(2023, 5, 17, 0) == (2023, 5, 17)


def test_add_days_within_a_month():
    assert add_days(2023, 1, 30, 1) == (2023, 1, 31)


def test_add_days_across_months():
    assert add_days(2023, 1, 31, 29) == (2023, 3, 1)
    assert add_days(2023, 11, 30, 1) == (2023, 12, 1)
    assert add_days(2024, 2, 28, 1) == (2024, 2, 29)


def test_add_days_across_years():
    assert add_days(2023, 12, 31, 1) == (2024, 1, 1)
    assert add_days(2023, 12, 1, 45) == (2024, 1, 15)


def test_parse_iso_date():
    assert parse_iso_date("2023-07-14") == (2023, 7, 14)
    assert parse_iso_date(" 2024-02-29 ") == (2024, 2, 29)


def test_parse_iso_date_accepts_the_last_day_of_a_month():
    assert parse_iso_date("2023-01-31") == (2023, 1, 31)
    assert parse_iso_date("2023-04-30") == (2023, 4, 30)


def test_parse_iso_date_rejects_bad_dates():
    for text in ("2023-02-29", "2023-04-31", "2023-07", "2023-01-00"):
        with pytest.raises(ValueError):
            parse_iso_date(text)


def test_format_iso_date_pads():
    assert format_iso_date(999, 3, 4) == "0999-03-04"
    assert format_iso_date(*parse_iso_date("2023-11-05")) == "2023-11-05"


def test_parse_duration():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45s") == 45
    assert parse_duration("2m5s") == 125
    assert parse_duration("0s") == 0


def test_parse_duration_rejects_unknown_units():
    with pytest.raises(ValueError):
        parse_duration("5x")


def test_parse_duration_rejects_a_unit_without_a_number():
    with pytest.raises(ValueError):
        parse_duration("h")


def test_parse_duration_rejects_a_number_without_a_unit():
    with pytest.raises(ValueError):
        parse_duration("10")


def test_reported_behaviour():
    from datelite.parse import parse_duration

    assert repr(parse_duration("2m5s")) == '125'
