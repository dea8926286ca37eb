"""Random but realistic events of the shop example (``examples/shop``) for its Kafka topics:
customers (upsert), products (debezium), orders and payments (append)."""
from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Any

TOPICS = ("shop.orders", "shop.payments", "shop.customers", "shop.products")
COUNTRIES = ["DE", "FR", "NL", "US", "CA", "BR", "JP", "IN", "XX"]  # XX: in no region of the seed
TIERS = ["bronze", "silver", "gold"]
CATEGORIES = ["books", "games", "garden", "kitchen"]

Record = tuple[Any, Any]


class ShopEvents:
    def __init__(self, seed: int = 0):
        self.rng = random.Random(seed)
        self.customers: dict[int, dict[str, Any]] = {}
        self.products: dict[int, dict[str, Any]] = {}
        self.next = {"customer": 1, "product": 1, "order": 1, "payment": 1}
        self.clock = datetime(2026, 1, 1)

    def _id(self, kind: str) -> int:
        self.next[kind] += 1
        return self.next[kind] - 1

    def round(self, orders: int = 40) -> dict[str, list[Record]]:
        """One batch of events on every topic, changing some rows of what came before."""
        rng, out = self.rng, {t: [] for t in TOPICS}
        for _ in range(rng.randint(3, 8)):  # new customers
            c = {"customer_id": self._id("customer"), "name": f"customer {self.next['customer']}",
                 "country": rng.choice(COUNTRIES), "tier": rng.choice(TIERS)}
            self.customers[c["customer_id"]] = c
            out["shop.customers"].append(({"customer_id": c["customer_id"]}, c))
        for cid in rng.sample(sorted(self.customers), k=min(3, len(self.customers))):  # updates, a delete
            if rng.random() < 0.25:
                del self.customers[cid]
                out["shop.customers"].append(({"customer_id": cid}, None))
            else:
                c = self.customers[cid] = {**self.customers[cid], "tier": rng.choice(TIERS),
                                           "country": rng.choice(COUNTRIES)}
                out["shop.customers"].append(({"customer_id": cid}, c))
        for _ in range(rng.randint(2, 5)):  # new products
            p = {"product_id": self._id("product"), "name": f"product {self.next['product']}",
                 "category": rng.choice(CATEGORIES), "price": round(rng.uniform(1, 80), 2)}
            self.products[p["product_id"]] = p
            out["shop.products"].append((None, {"before": None, "after": p, "op": "c"}))
        for pid in rng.sample(sorted(self.products), k=min(2, len(self.products))):  # price changes, a delete
            before = self.products[pid]
            if rng.random() < 0.2:
                del self.products[pid]
                out["shop.products"].append((None, {"payload": {"before": before, "after": None, "op": "d"}}))
            else:
                after = self.products[pid] = {**before, "price": round(rng.uniform(1, 80), 2)}
                out["shop.products"].append((None, {"payload": {"before": before, "after": after, "op": "u"}}))
        for _ in range(orders):
            self.clock += timedelta(minutes=rng.randint(1, 30))
            order = {"order_id": self._id("order"), "customer_id": rng.randint(1, self.next["customer"]),
                     "product_id": rng.randint(1, self.next["product"]), "quantity": rng.choice([0, 1, 1, 2, 3]),
                     "ordered_at": self.clock.isoformat()}
            out["shop.orders"].append((None, order))
            if rng.random() < 0.7:
                amount = round(rng.uniform(-20, 150), 2)
                out["shop.payments"].append((None, {"payment_id": self._id("payment"), "order_id": order["order_id"],
                                                    "amount": amount}))
        return out
