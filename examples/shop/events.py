"""Send the shop example's events to a broker."""
from __future__ import annotations


def main() -> None:
    """Send rounds of shop events to a broker: ``python examples/shop/events.py --rounds 3``."""
    import argparse
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from devkit.kafka import create_topics, produce
    from devkit.shop import TOPICS, ShopEvents

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--orders", type=int, default=40, help="orders per round")
    parser.add_argument("--seed", type=int, default=0, help="the same seed sends the same events again")
    args = parser.parse_args()
    create_topics(args.bootstrap, *TOPICS, "shop.revenue_by_category")
    events = ShopEvents(args.seed)
    for _ in range(args.rounds):
        for topic, records in events.round(orders=args.orders).items():
            produce(args.bootstrap, topic, records)
    print(f"sent {args.rounds} round(s) of {args.orders} orders with payments, customer and product changes")


if __name__ == "__main__":
    main()
