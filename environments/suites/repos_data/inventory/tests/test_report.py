from inventory.report import format_cents, low_stock, most_valuable, total_value_cents
from inventory.store import Store


def make_store():
    store = Store()
    store.add("A1", "apple", 50, 10)
    store.add("B2", "bread", 300, 2)
    store.add("C3", "cheese", 250, 5)
    return store


def test_total_value():
    assert total_value_cents(make_store()) == 500 + 600 + 1250


def test_low_stock_includes_reorder_level():
    assert low_stock(make_store()) == ["B2", "C3"]


def test_most_valuable_ranks_and_truncates():
    assert most_valuable(make_store(), 2) == ["C3", "B2"]
    assert most_valuable(make_store(), 10) == ["C3", "B2", "A1"]


def test_most_valuable_ties_by_sku():
    store = Store()
    store.add("Y", "y", 100, 1)
    store.add("X", "x", 50, 2)
    assert most_valuable(store, 2) == ["X", "Y"]


def test_format_cents():
    assert format_cents(12345) == "$123.45"
    assert format_cents(5) == "$0.05"
    assert format_cents(-250) == "-$2.50"
