"""Join keys as columns: a join on an expression of one side's columns (``ON o.cust % 3 =
c.id``, ``ON lower(a.email) = b.email``) becomes a join on a column that a Map computes
on that side first, as differential dataflow and Feldera index a collection by a computed
key before a join. The incremental join keeps each side's integral; with the key a
column of it, that integral is arranged and probed by the key like any other, where a
key computed over the state has no arrangement (a tick that changed the other side read
the whole state). The cost is that side's rows kept once more, with the key: an index.

The key's column is named by the expression's text, so the same expression over the same
input is one Map (and one state) wherever it occurs. A Map above the join drops the key
columns again: the join's output is what it was.

Keys of two types Spark compares by casting (a STRING and a number, a STRING and a DATE)
are made explicit the same way: ``casts`` (what Spark's analyzer coerces each side to, which
the SQL front end cannot know: it has no types) wraps a side's key in its ``CAST``, which
then is that side's computed key column. Spark's comparison and this one then cast the
same values the same way, with ANSI mode's error or NULL where a string does not cast."""
from __future__ import annotations

import hashlib
from typing import Callable, Sequence

import sqlglot
from sqlglot import exp

from ..circuit.operators import Join, Map, Operator, passthrough, quote, with_inputs
from .predicates import key_terms
from .relations import DIALECT


#: per key pair of a join, the SQL types Spark casts its left and its right key to (None: as it is)
Casts = Callable[[Join], Sequence[tuple[str | None, str | None]]]


def key_columns(root: Operator, casts: Casts | None = None) -> Operator:
    """``root`` with every join on an expression key joining on a computed column instead
    (a :class:`~..circuit.operators.Temporal` filter stays: its keys are the clock's), and
    with ``casts``, every key Spark casts to compare it joining on its cast."""
    done: dict[str, Operator] = {}

    def visit(op: Operator) -> Operator:
        if op.id not in done:
            new = with_inputs(op, tuple(visit(i) for i in op.inputs))
            if type(new) is Join and new.keys:
                new = _keyed(new, casts(new) if casts else ())
            done[op.id] = new
        return done[op.id]

    return visit(root)


def _parsed(text: str) -> exp.Expr:
    return sqlglot.parse_one(text, read=DIALECT).unnest()


def _keyed(join: Join, casts: Sequence[tuple[str | None, str | None]]) -> Operator:
    sides = [join.left, join.right]
    pairs = [list(p) for p in join.keys]
    added = False
    for i in (0, 1):
        computed: dict[str, str] = {}  # expression's SQL → its column
        for j, pair in enumerate(pairs):
            node = _parsed(pair[i])
            to = casts[j][i] if j < len(casts) else None
            if to is not None:
                node = exp.Cast(this=node, to=exp.DataType.build(to, dialect=DIALECT))
            if isinstance(node, exp.Column) and not node.table:
                pair[i] = quote(node.name)  # (`a`) is `a`
                continue
            text = node.sql(DIALECT)
            if text not in computed:
                computed[text] = _name(text, set(sides[i].columns) | set(computed.values()))
            pair[i] = quote(computed[text])
        if computed:
            sides[i] = Map(sides[i], passthrough(sides[i].columns) + tuple((n, e) for e, n in computed.items()))
            added = True
    keys = tuple((a, b) for a, b in pairs)
    if keys == join.keys:
        return join
    on = _parsed(join.on)
    for term, hit, swapped in key_terms(on, join.keys):
        if hit is not None:
            left, right = keys[hit][::-1] if swapped else keys[hit]
            term.set("this", _parsed(left))
            term.set("expression", _parsed(right))
    joined = Join(sides[0], sides[1], on.sql(DIALECT), keys)
    return Map(joined, passthrough(join.columns)) if added else joined


def _name(text: str, taken: set[str]) -> str:
    """A column for the key ``text``: named by its digest (the same key, the same column)."""
    name = "_key_" + hashlib.sha1(text.encode()).hexdigest()[:10]
    while name in taken:
        name += "_"
    return name
