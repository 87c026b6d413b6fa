import dataclasses


@dataclasses.dataclass
class Item:
    sku: str
    name: str
    price_cents: int
    quantity: int = 0
    reorder_level: int = 5

    def value_cents(self):
        return self.price_cents * self.quantity

    def needs_reorder(self):
        return self.quantity <= self.reorder_level
