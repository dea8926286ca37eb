"""Nexmark events (persons, auctions, bids), generated as the published generator does.

Follows the Nexmark generator of Apache Beam / the nexmark-flink suite: events come in
epochs of 50 (1 person, 3 auctions, 46 bids); ids start at 1000; bids go to a hot auction
and a hot bidder 99% of the time (one in 100 is "hot"), otherwise to one of the last 100
in-flight auctions and 1,000 active people; prices are ``100 * 10^(6 * U)`` cents;
auctions expire after a random time around the in-flight horizon; ``extra`` pads each
event to the spec's average size (person 200, auction 500, bid 100 bytes). Event time
advances by ``1 / rate`` seconds per event from a fixed base, so runs are reproducible.

Pure Python with no dependencies: the pydbsp baseline (another interpreter) imports it too.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Iterator

PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID, FIRST_AUCTION_ID, FIRST_CATEGORY_ID = 1000, 1000, 10
NUM_CATEGORIES = 5
NUM_ACTIVE_PEOPLE, PERSON_ID_LEAD = 1000, 10
NUM_IN_FLIGHT_AUCTIONS, AUCTION_ID_LEAD = 100, 10
HOT_AUCTION_RATIO = HOT_BIDDER_RATIO = HOT_SELLER_RATIO = HOT_CHANNELS_RATIO = 100
CHANNELS_NUMBER = 10_000
AVG_PERSON_BYTES, AVG_AUCTION_BYTES, AVG_BID_BYTES = 200, 500, 100
BASE_TIME = datetime(2026, 11, 1)

US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent",
             "Cheyenne"]
FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"]
HOT_CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]
HOT_URLS = [f"https://www.nexmark.com/{c.lower()}/item.htm?query=1" for c in HOT_CHANNELS]

#: the three streams' columns, as Spark DDL
SCHEMAS = {
    "person": "id bigint, name string, email_address string, credit_card string, city string, state string, "
              "date_time timestamp, extra string",
    "auction": "id bigint, item_name string, description string, initial_bid bigint, reserve bigint, "
               "date_time timestamp, expires timestamp, seller bigint, category bigint, extra string",
    "bid": "auction bigint, bidder bigint, price bigint, channel string, url string, date_time timestamp, "
           "extra string",
}


@dataclass(frozen=True)
class Event:
    kind: str  # person | auction | bid
    row: dict


def _last_base0_person(event_id: int) -> int:
    epoch, offset = divmod(event_id, TOTAL_PROPORTION)
    return epoch * PERSON_PROPORTION + min(offset, PERSON_PROPORTION - 1)


def _last_base0_auction(event_id: int) -> int:
    epoch, offset = divmod(event_id, TOTAL_PROPORTION)
    if offset < PERSON_PROPORTION:  # not yet an auction in this epoch: the previous epoch's last
        epoch, offset = epoch - 1, AUCTION_PROPORTION - 1
    elif offset >= PERSON_PROPORTION + AUCTION_PROPORTION:  # after the auctions: this epoch's last
        offset = AUCTION_PROPORTION - 1
    else:
        offset -= PERSON_PROPORTION
    return max(epoch * AUCTION_PROPORTION + offset, 0)


class Generator:
    """The events numbered ``0 .. n-1``; ``rate`` events per second of event time."""

    def __init__(self, seed: int = 0, rate: float = 1000.0):
        self.rng = random.Random(seed)
        self.rate = rate

    def events(self, n: int, first: int = 0) -> Iterator[Event]:
        for event_id in range(first, first + n):
            offset = event_id % TOTAL_PROPORTION
            at = BASE_TIME + timedelta(seconds=event_id / self.rate)
            if offset < PERSON_PROPORTION:
                yield Event("person", self._person(event_id, at))
            elif offset < PERSON_PROPORTION + AUCTION_PROPORTION:
                yield Event("auction", self._auction(event_id, at))
            else:
                yield Event("bid", self._bid(event_id, at))

    # --- the pieces, as in the spec -------------------------------------------------------

    def _string(self, n: int) -> str:
        return "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(self.rng.randint(3, n))).strip() \
            or "x"

    def _extra(self, size: int, average: int) -> str:
        want = average * 9 // 10 - size  # +/- 10% around the average
        return "" if want <= 0 else "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in
                                            range(self.rng.randint(want, want + average // 5)))

    def _price(self) -> int:
        return round(10 ** (self.rng.random() * 6) * 100)

    def _next_person(self, event_id: int) -> int:
        people = _last_base0_person(event_id) + 1
        active = min(people, NUM_ACTIVE_PEOPLE)
        return people - active + self.rng.randrange(active + PERSON_ID_LEAD)

    def _next_auction(self, event_id: int) -> int:
        last = _last_base0_auction(event_id)
        low = max(last - NUM_IN_FLIGHT_AUCTIONS, 0)
        return low + self.rng.randrange(last - low + 1 + AUCTION_ID_LEAD)

    def _auction_length(self) -> timedelta:
        horizon = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION / AUCTION_PROPORTION / self.rate  # seconds
        return timedelta(seconds=1 / self.rate + self.rng.random() * 2 * horizon)

    def _person(self, event_id: int, at: datetime) -> dict:
        row = {"id": _last_base0_person(event_id) + FIRST_PERSON_ID,
               "name": f"{self.rng.choice(FIRST_NAMES)} {self.rng.choice(LAST_NAMES)}",
               "email_address": f"{self._string(7)}@{self._string(5)}.com",
               "credit_card": " ".join(f"{self.rng.randrange(10000):04d}" for _ in range(4)),
               "city": self.rng.choice(US_CITIES), "state": self.rng.choice(US_STATES), "date_time": at}
        row["extra"] = self._extra(sum(len(str(v)) for v in row.values()), AVG_PERSON_BYTES)
        return row

    def _auction(self, event_id: int, at: datetime) -> dict:
        if self.rng.randrange(HOT_SELLER_RATIO) > 0:
            seller = (_last_base0_person(event_id) // HOT_SELLER_RATIO) * HOT_SELLER_RATIO
        else:
            seller = self._next_person(event_id)
        initial = self._price()
        row = {"id": _last_base0_auction(event_id) + FIRST_AUCTION_ID, "item_name": self._string(20),
               "description": self._string(100), "initial_bid": initial, "reserve": initial + self._price(),
               "date_time": at, "expires": at + self._auction_length(), "seller": seller + FIRST_PERSON_ID,
               "category": FIRST_CATEGORY_ID + self.rng.randrange(NUM_CATEGORIES)}
        row["extra"] = self._extra(sum(len(str(v)) for v in row.values()), AVG_AUCTION_BYTES)
        return row

    def _bid(self, event_id: int, at: datetime) -> dict:
        if self.rng.randrange(HOT_AUCTION_RATIO) > 0:
            auction = (_last_base0_auction(event_id) // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
        else:
            auction = self._next_auction(event_id)
        if self.rng.randrange(HOT_BIDDER_RATIO) > 0:
            bidder = (_last_base0_person(event_id) // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
        else:
            bidder = self._next_person(event_id)
        if self.rng.randrange(HOT_CHANNELS_RATIO) > 0:
            i = self.rng.randrange(len(HOT_CHANNELS))
            channel, url = HOT_CHANNELS[i], HOT_URLS[i]
        else:
            n = self.rng.randrange(CHANNELS_NUMBER)
            channel = f"channel-{n}"
            url = f"https://www.nexmark.com/{self._string(5)}/{self._string(5)}/item.htm?query=1&channel_id={n}"
        row = {"auction": auction + FIRST_AUCTION_ID, "bidder": bidder + FIRST_PERSON_ID, "price": self._price(),
               "channel": channel, "url": url, "date_time": at}
        row["extra"] = self._extra(sum(len(str(v)) for v in row.values()), AVG_BID_BYTES)
        return row
