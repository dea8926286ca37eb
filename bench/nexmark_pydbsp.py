"""Nexmark on pydbsp (the pure-Python DBSP): the baseline for bench/nexmark.py.

pydbsp 2.1.0 needs Python >= 3.12, so it lives in its own virtualenv::

    ~/.pyenv/versions/3.12.1/bin/python -m venv .venv-pydbsp
    .venv-pydbsp/bin/pip install pydbsp==2.1.0
    .venv-pydbsp/bin/python bench/nexmark_pydbsp.py --events 50000 --per-tick 5000 \\
        --queries q0,q1,q3,q4 --seed 0 --rate 1000 --json OUT.json

Each query (bench/nexmark_queries.py says what it means) is a pydbsp circuit built the way
pydbsp's README builds one: every input is a 1-D ``Input`` lifted to the 2-D lattice by
``LiftStreamIntroduction``; filters and projections are ``LiftLiftSelect`` /
``LiftLiftProject``; joins ``IndexedDeltaLiftedDeltaLiftedJoin`` (the bilinear form, here
``I(A)⋈ΔB + ΔA⋈z⁻¹I(B)`` as the inner axis stays at 0; sort-merge over an index); GROUP BY
``DeltaLiftedDeltaLiftedGroupBy``. That group-by takes any Python function of a group's
rows, so ROW_NUMBER top-k (q6, q9, q18, q19) and COUNT DISTINCT (q15, q16) are aggregates
too. Two costs of pydbsp show in the tick times, which grow with history: an integrated
state is a fresh copy every tick (``IndexedZSetAddition.add`` copies the dict), and the
group-by, whose changed-keys input is ``Iᵒ(delta)``, re-aggregates every group every tick
when only the outer axis moves.

The events (bench/nexmark_events.py) are fed in ticks of ``--per-tick``: a tick pushes one
Z-set delta per input (weight +1 per row, built before the clock starts) at outer time
``(tick,)``, reads the view's delta at ``(tick, 0)`` and compacts storage (pydbsp's GC;
without it every tick's copy of every integrated state stays in memory). That is timed with
``time.perf_counter``; events/s is all events (of every kind) / the ticks' total time.
After the last tick the integrated deltas are compared, as bags, with the same query
computed in plain Python over all events.

``--json`` writes a list of ``{query, supported, reason, events, ticks, rate (events/s),
tick_seconds, out_rows, equal}``, which bench/nexmark.py reads.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from nexmark_events import Generator  # noqa: E402
from nexmark_queries import QUERIES  # noqa: E402
from pydbsp.circuit import Circuit  # noqa: E402
from pydbsp.compute import ComputeCtx  # noqa: E402
from pydbsp.core import Antichain, dbsp_time  # noqa: E402
from pydbsp.evaluate import Evaluator  # noqa: E402
from pydbsp.indexed_relational_operators import (  # noqa: E402
    DeltaLiftedDeltaLiftedGroupBy,
    IndexedDeltaLiftedDeltaLiftedJoin,
    LiftLiftIndex,
)
from pydbsp.indexed_zset import IndexedZSetAddition  # noqa: E402
from pydbsp.operator import Input, Lift1, Lift2, LiftStreamIntroduction  # noqa: E402
from pydbsp.progress import NodeId  # noqa: E402
from pydbsp.relational_operators import LiftLiftProject, LiftLiftSelect  # noqa: E402
from pydbsp.storage import DictStorage  # noqa: E402
from pydbsp.zset import ZSet, ZSetAddition  # noqa: E402

# --- rows --------------------------------------------------------------------------------
# Z-set elements must be hashable: the generator's dicts become these tuples. Built with
# ``Cls(**row)``, so a column added to or missing from SCHEMAS fails loudly.


class Person(NamedTuple):
    id: int
    name: str
    email_address: str
    credit_card: str
    city: str
    state: str
    date_time: datetime
    extra: str


class Auction(NamedTuple):
    id: int
    item_name: str
    description: str
    initial_bid: int
    reserve: int
    date_time: datetime
    expires: datetime
    seller: int
    category: int
    extra: str


class Bid(NamedTuple):
    auction: int
    bidder: int
    price: int
    channel: str
    url: str
    date_time: datetime
    extra: str


ROW_TYPES: dict[str, Callable[..., tuple]] = {"person": Person, "auction": Auction, "bid": Bid}
#: q13's side input (key, value), the table bench/nexmark.py loads; pushed at tick 0
SIDE_ROWS = [(k, f"side-{k % 97}") for k in range(10_000)]

Tables = dict[str, list[tuple]]  # input name -> rows

# --- scalar pieces of the queries, shared by the circuits and the batch check -------------

DOLLAR_TO_EURO = Decimal("0.908")  # Spark reads 0.908 as a decimal: exact, like Decimal
HOT_CHANNEL_IDS = {"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
CHANNEL_ID = re.compile(r"(&|^)channel_id=([^&]*)")


def tumble_10s(t: datetime) -> datetime:
    """q7/q8's window start: the time rounded down to 10 s (offsets are whole minutes)."""
    return t.replace(second=t.second - t.second % 10, microsecond=0)


def hop_start(t: datetime, k: int) -> datetime:
    """q5's k-th window start (of five 10 s windows sliding by 2 s) holding ``t``."""
    return t.replace(second=t.second - t.second % 2, microsecond=0) - timedelta(seconds=2 * k)


def day(t: datetime) -> str:
    return t.strftime("%Y-%m-%d")


def bid_time_type(t: datetime) -> str:
    if 8 <= t.hour <= 18:
        return "dayTime"
    return "nightTime" if t.hour <= 6 or t.hour >= 20 else "otherTime"


def channel_id(b: Bid) -> str:
    """q21's CASE. Spark's regexp_extract gives '' (not NULL) on no match, so q21's WHERE
    keeps every bid and the query is a projection."""
    hot = HOT_CHANNEL_IDS.get(b.channel.lower())
    if hot is not None:
        return hot
    m = CHANNEL_ID.search(b.url)
    return m.group(2) if m else ""


def url_dirs(url: str) -> tuple[str | None, str | None, str | None]:
    """q22's ``try_element_at(split(url, '/'), 4..6)``: NULL past the end."""
    parts: list[str | None] = [*url.split("/"), None, None, None]
    return parts[3], parts[4], parts[5]


def in_auction(a: Auction, b: Bid) -> bool:
    """q4/q6/q9's ``b.date_time BETWEEN a.date_time AND a.expires``."""
    return a.date_time <= b.date_time <= a.expires


# --- per-group aggregates (a group's rows in, one value out) ------------------------------


def mean(values: list[int]) -> float:
    """AVG over integers as Spark's double: an exact sum divided once, so order-free."""
    return sum(values) / len(values)


def last_10_mean(finals: list[tuple[tuple[int, int, datetime], int]]) -> float:
    """q6: the mean final price of a seller's 10 latest auctions (date_time DESC, id)."""
    latest = sorted(finals, key=lambda kv: (kv[0][2], -kv[0][0]), reverse=True)[:10]
    return mean([final for _, final in latest])


def winning_bid(rows: list[tuple]) -> tuple:
    """q9: the joined row with the highest price, then the earliest bid, then bidder."""
    return min(rows, key=lambda r: (-r[6], r[7], r[5]))


def last_bid(bids: list[Bid]) -> tuple:
    """q18: the bid that is latest (then highest) of its (bidder, auction)."""
    b = max(bids, key=lambda b: (b.date_time, b.price))
    return b.auction, b.bidder, b.price, b.channel, b.url, b.date_time


def top_10_bids(bids: list[Bid]) -> tuple[tuple, ...]:
    """q19: an auction's 10 highest bids (then earliest, then bidder) with their rank."""
    top = sorted(bids, key=lambda b: (-b.price, b.date_time, b.bidder))[:10]
    return tuple((b.auction, b.bidder, b.price, b.date_time, rn) for rn, b in enumerate(top, 1))


def day_stats(bids: list[Bid]) -> tuple:
    """q15's columns after ``day``."""
    ranks = [[b for b in bids if b.price < 10_000], [b for b in bids if 10_000 <= b.price < 1_000_000],
             [b for b in bids if b.price >= 1_000_000]]
    return (len(bids), *(len(r) for r in ranks), len({b.bidder for b in bids}),
            *(len({b.bidder for b in r}) for r in ranks), len({b.auction for b in bids}))


def channel_stats(bids: list[Bid]) -> tuple:
    """q16's columns after ``channel, day``."""
    return (max(b.date_time.strftime("%H:%M") for b in bids), len(bids), sum(b.price < 10_000 for b in bids),
            len({b.bidder for b in bids}), len({b.auction for b in bids}))


def auction_stats(bids: list[Bid]) -> tuple:
    """q17's columns after ``auction, day``."""
    prices = [b.price for b in bids]
    return (len(bids), sum(p < 10_000 for p in prices), sum(p >= 1_000_000 for p in prices), min(prices),
            max(prices), mean(prices), sum(prices))


# --- circuit building blocks (2-D delta streams in, 2-D delta stream out) -----------------

Z: ZSetAddition[Any] = ZSetAddition()  # Z-set addition does not depend on the element type: one for all


def select(c: Circuit, s: NodeId, pred: Callable[[Any], bool]) -> NodeId:
    return LiftLiftSelect(pred=pred).connect(c, (s,))


def project(c: Circuit, s: NodeId, f: Callable[[Any], Any]) -> NodeId:
    return LiftLiftProject(f=f).connect(c, (s,))


def join(c: Circuit, left: NodeId, right: NodeId, left_key: Callable[[Any], Any], right_key: Callable[[Any], Any],
         out: Callable[[Any, Any], Any]) -> NodeId:
    """Equi-join on ``left_key = right_key``; ``out`` returns None to drop a pair (a
    residual predicate)."""
    return IndexedDeltaLiftedDeltaLiftedJoin(
        proj=lambda _key, a, b: out(a, b), group_a=IndexedZSetAddition(Z, left_key),
        group_b=IndexedZSetAddition(Z, right_key), out_group=Z,
    ).connect(c, (LiftLiftIndex(indexer=left_key).connect(c, (left,)),
                  LiftLiftIndex(indexer=right_key).connect(c, (right,))))


def expand(items: Iterable[tuple[Any, int]]) -> list[Any]:
    """A group's (row, weight) pairs as the bag of rows the SQL aggregate sees."""
    return [row for row, weight in items for _ in range(weight)]


def group_by(c: Circuit, s: NodeId, key: Callable[[Any], Any], agg: Callable[[list[Any]], Any]) -> NodeId:
    """``SELECT key, agg(rows) GROUP BY key``: a delta of ``(key, value)`` pairs."""
    return DeltaLiftedDeltaLiftedGroupBy(
        aggregate=lambda items: agg(expand(items)), group=IndexedZSetAddition(Z, key), out_group=Z,
    ).connect(c, (LiftLiftIndex(indexer=key).connect(c, (s,)),))


def union_all(c: Circuit, streams: list[NodeId]) -> NodeId:
    out = streams[0]
    for s in streams[1:]:
        out = Lift2(op=Z.add).connect(c, (out, s))
    return out


def flatten(c: Circuit, s: NodeId) -> NodeId:
    """``(key, rows)`` pairs to the rows, each with the pair's weight (linear)."""
    def rows(z: ZSet[Any]) -> ZSet[Any]:
        out: dict[Any, int] = defaultdict(int)
        for (_, group_rows), weight in z.items():
            for row in group_rows:
                out[row] += weight
        return ZSet({row: w for row, w in out.items() if w})
    return Lift1(f=rows).connect(c, (s,))


# --- batch counterparts, plain Python over all rows ---------------------------------------


def hash_join(left: list[Any], right: list[Any], left_key: Callable[[Any], Any],
              right_key: Callable[[Any], Any]) -> Iterator[tuple[Any, Any]]:
    by_key: dict[Any, list[Any]] = defaultdict(list)
    for row in right:
        by_key[right_key(row)].append(row)
    for row in left:
        for match in by_key.get(left_key(row), ()):
            yield row, match


def grouped(rows: Iterable[Any], key: Callable[[Any], Any], agg: Callable[[list[Any]], Any]) -> list[tuple[Any, Any]]:
    groups: dict[Any, list[Any]] = defaultdict(list)
    for r in rows:
        groups[key(r)].append(r)
    return [(k, agg(g)) for k, g in groups.items()]


# --- the queries ---------------------------------------------------------------------------

Build = Callable[[Circuit, dict[str, NodeId]], NodeId]
Batch = Callable[[Tables], Iterable[Any]]


@dataclass(frozen=True)
class Query:
    """A query twice: as a pydbsp circuit, and as plain Python to check the circuit with."""

    reads: tuple[str, ...]
    build: Build  # the circuit: the inputs' 2-D delta nodes -> the view's delta node
    batch: Batch  # the view over all rows, as a bag


def linear(pred: Callable[[Bid], bool] | None, out: Callable[[Bid], Any]) -> Query:
    """A filter (or none) and a projection over the bids."""
    def build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
        return project(c, s["bid"] if pred is None else select(c, s["bid"], pred), out)
    return Query(("bid",), build, lambda t: (out(b) for b in t["bid"] if pred is None or pred(b)))


def euros(b: Bid) -> Decimal:
    return DOLLAR_TO_EURO * b.price


OR_ID_CA = {"OR", "ID", "CA"}


def q3_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    auctions = select(c, s["auction"], lambda a: a.category == 10)
    people = select(c, s["person"], lambda p: p.state in OR_ID_CA)
    return join(c, auctions, people, lambda a: a.seller, lambda p: p.id, lambda a, p: (p.name, p.city, p.state, a.id))


def q3_batch(t: Tables) -> Iterable[Any]:
    return ((p.name, p.city, p.state, a.id)
            for a, p in hash_join(t["auction"], t["person"], lambda a: a.seller, lambda p: p.id)
            if a.category == 10 and p.state in OR_ID_CA)


AuctionBid = Callable[[Auction, Bid], tuple]


def auction_bids(c: Circuit, s: dict[str, NodeId], out: AuctionBid) -> NodeId:
    """q4/q6/q9's join: each auction with the bids placed while it was open."""
    return join(c, s["auction"], s["bid"], lambda a: a.id, lambda b: b.auction,
                lambda a, b: out(a, b) if in_auction(a, b) else None)


def auction_bids_batch(t: Tables, out: AuctionBid) -> list[tuple]:
    return [out(a, b) for a, b in hash_join(t["auction"], t["bid"], lambda a: a.id, lambda b: b.auction)
            if in_auction(a, b)]


def q4_closed(a: Auction, b: Bid) -> tuple:
    return a.id, a.category, b.price


def q4_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    finals = group_by(c, auction_bids(c, s, q4_closed), lambda r: r[:2], lambda rows: max(r[2] for r in rows))
    return group_by(c, finals, lambda kv: kv[0][1], lambda kvs: mean([final for _, final in kvs]))


def q4_batch(t: Tables) -> Iterable[Any]:
    finals = grouped(auction_bids_batch(t, q4_closed), lambda r: r[:2], lambda rows: max(r[2] for r in rows))
    return grouped(finals, lambda kv: kv[0][1], lambda kvs: mean([final for _, final in kvs]))


def q5_hops(b: Bid, k: int) -> tuple[int, datetime]:
    return b.auction, hop_start(b.date_time, k)


def q5_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    hops = union_all(c, [project(c, s["bid"], lambda b, k=k: q5_hops(b, k)) for k in range(5)])
    counts = group_by(c, hops, lambda h: h, len)
    top = group_by(c, counts, lambda kv: kv[0][1], lambda kvs: max(num for _, num in kvs))
    return join(c, counts, top, lambda kv: (kv[0][1], kv[1]), lambda kv: kv,
                lambda cnt, _: (cnt[0][0], cnt[1], cnt[0][1]))


def q5_batch(t: Tables) -> Iterable[Any]:
    counts = grouped((q5_hops(b, k) for b in t["bid"] for k in range(5)), lambda h: h, len)
    top = dict(grouped(counts, lambda kv: kv[0][1], lambda kvs: max(num for _, num in kvs)))
    return ((auction, num, start) for (auction, start), num in counts if top[start] == num)


def q6_closed(a: Auction, b: Bid) -> tuple:
    return a.id, a.seller, a.date_time, b.price


def q6_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    finals = group_by(c, auction_bids(c, s, q6_closed), lambda r: r[:3], lambda rows: max(r[3] for r in rows))
    return group_by(c, finals, lambda kv: kv[0][1], last_10_mean)


def q6_batch(t: Tables) -> Iterable[Any]:
    finals = grouped(auction_bids_batch(t, q6_closed), lambda r: r[:3], lambda rows: max(r[3] for r in rows))
    return grouped(finals, lambda kv: kv[0][1], last_10_mean)


def q7_row(b: Bid) -> tuple:
    return b.auction, b.price, b.bidder, b.date_time, b.extra


def q7_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    top = group_by(c, s["bid"], lambda b: tumble_10s(b.date_time), lambda bids: max(b.price for b in bids))
    return join(c, s["bid"], top, lambda b: (tumble_10s(b.date_time), b.price), lambda kv: kv,
                lambda b, _: q7_row(b))


def q7_batch(t: Tables) -> Iterable[Any]:
    top = dict(grouped(t["bid"], lambda b: tumble_10s(b.date_time), lambda bids: max(b.price for b in bids)))
    return (q7_row(b) for b in t["bid"] if top[tumble_10s(b.date_time)] == b.price)


def q8_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    people = project(c, s["person"], lambda p: (p.id, p.name, tumble_10s(p.date_time)))
    sellers = project(c, s["auction"], lambda a: (a.seller, tumble_10s(a.date_time)))
    return join(c, people, sellers, lambda p: (p[0], p[2]), lambda a: a, lambda p, _: p)


def q8_batch(t: Tables) -> Iterable[Any]:
    pairs = hash_join(t["person"], t["auction"], lambda p: (p.id, tumble_10s(p.date_time)),
                      lambda a: (a.seller, tumble_10s(a.date_time)))
    return ((p.id, p.name, tumble_10s(p.date_time)) for p, _ in pairs)


def q9_joined(a: Auction, b: Bid) -> tuple:
    return a.id, a.item_name, a.seller, a.category, b.auction, b.bidder, b.price, b.date_time


def q9_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    return project(c, group_by(c, auction_bids(c, s, q9_joined), lambda r: r[0], winning_bid), lambda kv: kv[1])


def q9_batch(t: Tables) -> Iterable[Any]:
    return (winner for _, winner in grouped(auction_bids_batch(t, q9_joined), lambda r: r[0], winning_bid))


def q13_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    return join(c, s["bid"], s["side_input"], lambda b: b.auction % 10_000, lambda kv: kv[0],
                lambda b, kv: (b.auction, b.bidder, b.price, b.date_time, kv[1]))


def q13_batch(t: Tables) -> Iterable[Any]:
    return ((b.auction, b.bidder, b.price, b.date_time, kv[1])
            for b, kv in hash_join(t["bid"], t["side_input"], lambda b: b.auction % 10_000, lambda kv: kv[0]))


def statistics_query(key: Callable[[Bid], tuple], agg: Callable[[list[Bid]], tuple]) -> Query:
    """q15-q17: one row of ``key + agg(bids)`` per group of bids."""
    def build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
        return project(c, group_by(c, s["bid"], key, agg), lambda kv: kv[0] + kv[1])
    return Query(("bid",), build, lambda t: (k + v for k, v in grouped(t["bid"], key, agg)))


def q18_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    return project(c, group_by(c, s["bid"], lambda b: (b.bidder, b.auction), last_bid), lambda kv: kv[1])


def q18_batch(t: Tables) -> Iterable[Any]:
    return (row for _, row in grouped(t["bid"], lambda b: (b.bidder, b.auction), last_bid))


def q19_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    return flatten(c, group_by(c, s["bid"], lambda b: b.auction, top_10_bids))


def q19_batch(t: Tables) -> Iterable[Any]:
    return (row for _, rows in grouped(t["bid"], lambda b: b.auction, top_10_bids) for row in rows)


def q20_row(b: Bid, a: Auction) -> tuple:
    return b.auction, b.bidder, b.price, b.channel, b.date_time, a.item_name, a.seller, a.category


def q20_build(c: Circuit, s: dict[str, NodeId]) -> NodeId:
    auctions = select(c, s["auction"], lambda a: a.category == 10)
    return join(c, s["bid"], auctions, lambda b: b.auction, lambda a: a.id, q20_row)


def q20_batch(t: Tables) -> Iterable[Any]:
    return (q20_row(b, a) for b, a in hash_join(t["bid"], t["auction"], lambda b: b.auction, lambda a: a.id)
            if a.category == 10)


CIRCUITS: dict[str, Query] = {
    "q0": linear(None, lambda b: (b.auction, b.bidder, b.price, b.date_time, b.extra)),
    "q1": linear(None, lambda b: (b.auction, b.bidder, euros(b), b.date_time, b.extra)),
    "q2": linear(lambda b: b.auction % 123 == 0, lambda b: (b.auction, b.price)),
    "q3": Query(("auction", "person"), q3_build, q3_batch),
    "q4": Query(("auction", "bid"), q4_build, q4_batch),
    "q5": Query(("bid",), q5_build, q5_batch),
    "q6": Query(("auction", "bid"), q6_build, q6_batch),
    "q7": Query(("bid",), q7_build, q7_batch),
    "q8": Query(("person", "auction"), q8_build, q8_batch),
    "q9": Query(("auction", "bid"), q9_build, q9_batch),
    "q13": Query(("bid", "side_input"), q13_build, q13_batch),
    "q14": linear(lambda b: 1_000_000 < euros(b) < 50_000_000,
                  lambda b: (b.auction, b.bidder, euros(b), bid_time_type(b.date_time), b.date_time, b.extra,
                             b.extra.count("c"))),
    "q15": statistics_query(lambda b: (day(b.date_time),), day_stats),
    "q16": statistics_query(lambda b: (b.channel, day(b.date_time)), channel_stats),
    "q17": statistics_query(lambda b: (b.auction, day(b.date_time)), auction_stats),
    "q18": Query(("bid",), q18_build, q18_batch),
    "q19": Query(("bid",), q19_build, q19_batch),
    "q20": Query(("bid", "auction"), q20_build, q20_batch),
    "q21": linear(None, lambda b: (b.auction, b.bidder, b.price, b.channel, channel_id(b))),
    "q22": linear(None, lambda b: (b.auction, b.bidder, b.price, b.channel, *url_dirs(b.url))),
}
#: the Nexmark queries with no SQL in bench/nexmark_queries.py, so no circuit here, and why
UNSUPPORTED = {
    "q10": "writes files partitioned by processing time: not a function of the input",
    "q11": "session windows: no SQL form in nexmark_queries.py to build or check against",
    "q12": "processing-time windows: not a function of the input",
}


# --- running -------------------------------------------------------------------------------


def ticks_of(events: int, per_tick: int, seed: int, rate: float) -> list[Tables]:
    """The events as rows, one ``{input: rows}`` per tick; the side input at tick 0."""
    ticks: list[Tables] = []
    for i, e in enumerate(Generator(seed, rate).events(events)):
        if i % per_tick == 0:
            ticks.append({"person": [], "auction": [], "bid": [], "side_input": SIDE_ROWS if not ticks else []})
        ticks[-1][e.kind].append(ROW_TYPES[e.kind](**e.row))
    return ticks


def bag(rows: Iterable[Any]) -> dict[Any, int]:
    """Rows as a Z-set's dict, weight +1 per row."""
    return dict(Counter(rows))


def run(name: str, query: Query, ticks: list[Tables]) -> tuple[list[float], dict[Any, int]]:
    """Builds the circuit, steps it once per tick; returns the tick times and the view."""
    evaluator = Evaluator(circuit=Circuit(), storage=DictStorage(), ctx=ComputeCtx(lattice=dbsp_time(2)), group=Z)
    inputs = {s: Input(frontier=Antichain(dbsp_time(1))).connect(evaluator.circuit, ()) for s in query.reads}
    lifted = {s: LiftStreamIntroduction(group=Z).connect(evaluator.circuit, (node,)) for s, node in inputs.items()}
    out = query.build(evaluator.circuit, lifted)
    seconds: list[float] = []
    view: dict[Any, int] = defaultdict(int)
    for tick, rows in enumerate(ticks):
        deltas = {s: ZSet(bag(rows[s])) for s in query.reads}
        started = time.perf_counter()
        for s, node in inputs.items():
            evaluator.push(node, deltas[s], (tick,))
        delta = evaluator.read(out, (tick, 0))
        evaluator.compact()
        seconds.append(time.perf_counter() - started)
        for row, weight in delta.items():
            view[row] += weight
        print(f"  {name} tick {tick}: {seconds[-1]:.3f}s, {len(delta.inner)} changed rows", file=sys.stderr)
    return seconds, {row: w for row, w in view.items() if w}


def measure(name: str, ticks: list[Tables], events: int) -> dict[str, Any]:
    """One query's result row (the --json schema)."""
    query = CIRCUITS.get(name)
    if query is None:
        reason = UNSUPPORTED.get(name, "not a Nexmark query")
        return {"query": name, "supported": False, "reason": reason, "events": events, "ticks": len(ticks),
                "rate": None, "tick_seconds": [], "out_rows": None, "equal": None}
    seconds, view = run(name, query, ticks)
    everything = {s: [r for t in ticks for r in t[s]] for s in query.reads}
    return {"query": name, "supported": True, "reason": None, "events": events, "ticks": len(ticks),
            "rate": events / sum(seconds), "tick_seconds": seconds, "out_rows": sum(view.values()),
            "equal": view == bag(query.batch(everything))}


def table(results: list[dict[str, Any]]) -> None:
    print("| query | events/s | first tick (s) | median tick (s) | last tick (s) | rows out | equal |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if not r["supported"]:
            print(f"| {r['query']} | cannot: {r['reason']} | | | | | |")
            continue
        s = r["tick_seconds"]
        print(f"| {r['query']} | {r['rate']:,.0f} | {s[0]:.3f} | {statistics.median(s):.3f} | {s[-1]:.3f} "
              f"| {r['out_rows']:,} | {'yes' if r['equal'] else 'NO'} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--per-tick", type=int, default=5_000)
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rate", type=float, default=1000.0, help="events per second of event time")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    ticks = ticks_of(args.events, args.per_tick, args.seed, args.rate)
    results = [measure(q, ticks, args.events) for q in args.queries.split(",")]
    print(f"\npydbsp: {args.events:,} events ({args.rate:g}/s of event time) in {len(ticks)} ticks of "
          f"{args.per_tick:,}\n")
    table(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
