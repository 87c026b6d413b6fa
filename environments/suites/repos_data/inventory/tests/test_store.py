import pytest

from inventory.store import OutOfStock, Store


def make_store():
    store = Store()
    store.add("A1", "apple", 50, 10)
    store.add("B2", "bread", 300, 2)
    return store


def test_add_rejects_duplicates_and_negatives():
    store = make_store()
    with pytest.raises(KeyError):
        store.add("A1", "again", 1)
    with pytest.raises(ValueError):
        store.add("C3", "cheese", -1)
    with pytest.raises(ValueError):
        store.add("C3", "cheese", 1, -2)


def test_add_allows_zero_price_and_quantity():
    store = Store()
    item = store.add("Z", "free sample", 0, 0)
    assert (item.price_cents, item.quantity) == (0, 0)


def test_restock_adds_and_rejects_nonpositive():
    store = make_store()
    store.restock("B2", 3)
    assert store.items["B2"].quantity == 5
    with pytest.raises(ValueError):
        store.restock("B2", 0)


def test_sell_reduces_stock_and_returns_revenue():
    store = make_store()
    assert store.sell("A1", 4) == 200
    assert store.items["A1"].quantity == 6


def test_sell_entire_stock_is_allowed():
    store = make_store()
    store.sell("B2", 2)
    assert store.items["B2"].quantity == 0


def test_sell_more_than_stock_raises():
    store = make_store()
    with pytest.raises(OutOfStock):
        store.sell("B2", 3)


def test_discount_rounds_down():
    store = make_store()
    store.apply_discount(15)
    assert store.items["A1"].price_cents == 42
    assert store.items["B2"].price_cents == 255


def test_discount_bounds():
    store = make_store()
    store.apply_discount(100)
    assert store.items["A1"].price_cents == 0
    with pytest.raises(ValueError):
        store.apply_discount(101)
    with pytest.raises(ValueError):
        store.apply_discount(-1)
