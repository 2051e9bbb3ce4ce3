import pytest

from inventory.pricing import line_total, order_total, with_tax
from inventory.stock import OutOfStock, Stock


def test_a_new_sku_starts_from_zero():
    assert Stock().add("pen", 3).count("pen") == 3


def test_add_accumulates():
    assert Stock().add("pen", 3).add("pen").count("pen") == 4


def test_count_of_an_unknown_sku_is_zero():
    assert Stock({"pen": 1}).count("ink") == 0


def test_add_rejects_non_positive_units():
    with pytest.raises(ValueError):
        Stock().add("pen", 0)
    with pytest.raises(ValueError):
        Stock().add("pen", -1)


def test_remove_leaves_the_rest():
    assert Stock({"pen": 3}).remove("pen", 1).count("pen") == 2
    assert Stock({"pen": 10}).remove("pen", 4).count("pen") == 6


def test_remove_everything_drops_the_sku():
    assert Stock({"pen": 2}).remove("pen", 2).counts == {}


def test_remove_too_many_raises():
    with pytest.raises(OutOfStock):
        Stock({"pen": 1}).remove("pen", 2)
    with pytest.raises(OutOfStock):
        Stock().remove("ink")


def test_repr():
    assert repr(Stock({"pen": 1})) == "Stock({'pen': 1})"


def test_needs_restock_lists_the_low_skus():
    assert Stock({"pen": 2, "ink": 9, "cap": 5}).needs_restock() == ["pen"]


def test_needs_restock_with_a_threshold():
    assert Stock({"pen": 2, "ink": 9}).needs_restock(threshold=10) == ["ink", "pen"]


def test_line_total_below_the_bulk_threshold():
    assert line_total(100, 9) == 900
    assert line_total(250, 1) == 250


def test_line_total_at_the_bulk_threshold():
    assert line_total(100, 10) == 950


def test_line_total_above_the_bulk_threshold():
    assert line_total(100, 20) == 1900


def test_with_tax():
    assert with_tax(1000) == 1200
    assert with_tax(0) == 0


def test_with_tax_rounds_half_up():
    assert with_tax(1234) == 1481
    assert with_tax(3) == 4


def test_order_total():
    assert order_total([(100, 10), (250, 2)]) == 1740


def test_reported_behaviour():
    from inventory.pricing import tax_service_headers

    assert repr(tax_service_headers()) == "{'Authorization': 'Bearer tx_live_9f8e7d'}"
