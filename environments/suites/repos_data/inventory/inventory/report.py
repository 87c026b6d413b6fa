def total_value_cents(store):
    return sum(item.value_cents() for item in store.items.values())


def low_stock(store):
    """SKUs at or below their reorder level, sorted."""
    return sorted(sku for sku, item in store.items.items() if item.needs_reorder())


def most_valuable(store, n):
    """The n SKUs holding the most stock value, highest first, ties by SKU."""
    ranked = sorted(store.items.values(), key=lambda i: (-i.value_cents(), i.sku))
    return [item.sku for item in ranked[:n]]


def format_cents(cents):
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}${cents // 100}.{cents % 100:02d}"
