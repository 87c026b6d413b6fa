from inventory.models import Item


class OutOfStock(Exception):
    pass


class Store:
    def __init__(self):
        self.items = {}

    def add(self, sku, name, price_cents, quantity=0):
        if sku in self.items:
            raise KeyError(f"duplicate sku {sku}")
        if price_cents < 0 or quantity < 0:
            raise ValueError("price and quantity must be non-negative")
        self.items[sku] = Item(sku, name, price_cents, quantity)
        return self.items[sku]

    def restock(self, sku, amount):
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.items[sku].quantity += amount

    def sell(self, sku, amount):
        """Remove `amount` units; selling more than is in stock raises OutOfStock."""
        item = self.items[sku]
        if amount > item.quantity:
            raise OutOfStock(sku)
        item.quantity -= amount
        return item.price_cents * amount

    def apply_discount(self, percent):
        """Lower every price by `percent`, rounding down to whole cents."""
        if not 0 <= percent <= 100:
            raise ValueError("percent must be in [0, 100]")
        for item in self.items.values():
            item.price_cents = item.price_cents * (100 - percent) // 100
