"""Z-set operators: small immutable nodes of a circuit.

A node's value at each tick is a Z-set (rows with an integer weight ``_w``), except
``Partials``/keyed ``Integral`` nodes, whose values are additive tables (one row of
summable columns per group key). Expressions are Spark SQL strings over the input's
column names, so the runtime hands them to Spark as they are and node identity is
plain data: a node's ``id`` is a hash of its parameters and its inputs' ids, stable
across processes, which is what names its persisted state.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import AbstractSet, Callable, Iterator

WEIGHT = "_w"
COUNT = "_cnt"


@dataclass(frozen=True, eq=False)
class Operator:
    """Base: equality and hashing go through the content id, not a deep compare."""

    @property
    def inputs(self) -> tuple[Operator, ...]:
        return ()

    @property
    def columns(self) -> tuple[str, ...]:
        raise NotImplementedError

    def params(self) -> tuple:
        return tuple(
            getattr(self, f.name) for f in fields(self) if not isinstance(getattr(self, f.name), Operator)
            and f.name != "inputs_"
        )

    @cached_property
    def id(self) -> str:
        text = repr((type(self).__name__, self.params(), tuple(i.id for i in self.inputs)))
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def label(self) -> str:
        """One line for ``explain``."""
        return type(self).__name__


@dataclass(frozen=True, eq=False)
class Unary(Operator):
    """An operator over one input, whose columns it keeps unless it says otherwise."""

    input: Operator

    @property
    def inputs(self) -> tuple[Operator, ...]:
        return (self.input,)

    @property
    def columns(self) -> tuple[str, ...]:
        return self.input.columns


@dataclass(frozen=True, eq=False)
class Input(Operator):
    """The change stream of a source relation."""

    name: str
    cols: tuple[str, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return self.cols

    def label(self) -> str:
        return f"Input {self.name}({', '.join(self.cols)})"


@dataclass(frozen=True, eq=False)
class Map(Unary):
    """Projection with expressions (linear)."""

    exprs: tuple[tuple[str, str], ...]  # (output name, Spark SQL over input columns)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.exprs)

    @property
    def is_projection(self) -> bool:
        """Only picks and renames columns, so it commutes freely with integration."""
        return all(is_identifier(e) for _, e in self.exprs)

    @property
    def computes_nothing(self) -> bool:
        """Picks and renames columns and adds constants (a decorrelated subquery's marker
        ``TRUE``): nothing to compute per row."""
        return all(is_identifier(e) or _CONSTANT.fullmatch(e) for _, e in self.exprs)

    def label(self) -> str:
        shown = [e if e == quote(n) else f"{e} AS {n}" for n, e in self.exprs]
        return f"Map [{', '.join(shown)}]"


@dataclass(frozen=True, eq=False)
class Filter(Unary):
    """Keeps rows whose predicate is true (linear)."""

    predicate: str

    def label(self) -> str:
        return f"Filter {self.predicate}"


#: the generators :class:`Generate` runs (Spark's names), each with or without ``_outer``
GENERATORS = ("explode", "posexplode", "inline")


@dataclass(frozen=True, eq=False)
class Generate(Unary):
    """A generator over a column (linear: a flat-map): each input row becomes one row per
    element of its array or entry of its map, with the input row's columns and weight.
    ``kind`` is Spark's name (:data:`GENERATORS`); ``names`` are the generated columns
    (``posexplode``: the position first; a map's key and value; ``inline``: the struct's
    fields). ``outer``: a row whose collection is empty or NULL stays once, with NULLs."""

    kind: str
    column: str
    names: tuple[str, ...]
    outer: bool = False

    @property
    def columns(self) -> tuple[str, ...]:
        return self.input.columns + self.names

    @property
    def sql(self) -> str:
        """The generator as Spark SQL, its columns named."""
        fn = self.kind + ("_outer" if self.outer else "")
        return f"{fn}({quote(self.column)}) AS ({', '.join(map(quote, self.names))})"

    def label(self) -> str:
        return f"Generate {self.sql}"


@dataclass(frozen=True, eq=False)
class Plus(Operator):
    """Z-set sum, i.e. UNION ALL (linear); inputs are aligned by position."""

    inputs_: tuple[Operator, ...]

    @property
    def inputs(self) -> tuple[Operator, ...]:
        return self.inputs_

    @property
    def columns(self) -> tuple[str, ...]:
        return self.inputs_[0].columns

    def label(self) -> str:
        return "Plus"


@dataclass(frozen=True, eq=False)
class Scale(Unary):
    """Multiplies each row's weight by an integer Spark SQL expression over its columns
    (linear): ``"-1"`` negates, a count column turns one row into that many."""

    factor: str

    def label(self) -> str:
        return f"Scale by {self.factor}"


@dataclass(frozen=True, eq=False)
class Pad(Unary):
    """The input's rows extended by NULLs in the columns of ``like`` (linear): the
    unmatched side of an outer join. ``like`` only lends its column names and types."""

    like: Operator

    @property
    def inputs(self) -> tuple[Operator, ...]:
        return (self.input, self.like)

    @property
    def columns(self) -> tuple[str, ...]:
        return self.input.columns + self.like.columns

    def label(self) -> str:
        return f"Pad with NULL [{', '.join(self.like.columns)}]"


def minus(a: Operator, b: Operator) -> Operator:
    """The Z-set difference a - b."""
    return Plus((a, Scale(b, "-1")))


@dataclass(frozen=True, eq=False)
class Join(Operator):
    """Inner join, weights multiply (bilinear). Column names of both sides are disjoint."""

    left: Operator
    right: Operator
    on: str  # Spark SQL predicate over left and right columns; "TRUE" for a cross join
    keys: tuple[tuple[str, str], ...] = ()  # equi-key pairs contained in ``on``, for the reader

    @property
    def inputs(self) -> tuple[Operator, ...]:
        return (self.left, self.right)

    @property
    def columns(self) -> tuple[str, ...]:
        return self.left.columns + self.right.columns

    def label(self) -> str:
        return f"Join on {self.on}"


@dataclass(frozen=True, eq=False)
class Temporal(Join):
    """The rows of ``left`` for which ``on`` holds at the time ``right`` (the clock's one
    row) says: a join with the clock that keeps only ``left``'s columns. So a tick where
    only the time moves changes the rows whose window opened or closed, and a range index
    of ``left``'s state by the compared column finds them (the rows in both windows cancel)."""

    @property
    def columns(self) -> tuple[str, ...]:
        return self.left.columns

    @property
    def joined(self) -> Join:
        """The join with the clock's columns, which ``on`` reads."""
        return Join(self.left, self.right, self.on, self.keys)

    def label(self) -> str:
        return f"Temporal filter {self.on}"


#: variances and standard deviations, as Spark's central-moment aggregates compute them
#: (of the values as DOUBLE; DOUBLE; NULL over no values, a sample's NULL over one)
MOMENTS = frozenset({"stddev_samp", "stddev_pop", "var_samp", "var_pop"})


@dataclass(frozen=True, repr=False)
class AggCall:
    """One aggregate: ``func(arg)``; ``arg`` is an input column, None for COUNT(*). An
    aggregate Spark computes (``sql``: its call over input columns, such as
    ``PERCENTILE(`_x0`, 0.5)``) is recomputed over the touched groups' rows; ``arg`` is
    then its first column."""

    name: str
    func: str  # count | sum | avg | min | max | stddev_samp | stddev_pop | var_samp | var_pop, or Spark's name
    arg: str | None
    distinct: bool = False
    sql: str | None = None

    def __repr__(self) -> str:
        """The dataclass's repr, ``sql`` only when set: a node's id hashes it, and the ids
        of aggregates the engine computes itself name persisted state."""
        extra = "" if self.sql is None else f", sql={self.sql!r}"
        return (f"AggCall(name={self.name!r}, func={self.func!r}, arg={self.arg!r}, distinct={self.distinct!r}"
                f"{extra})")

    @property
    def linear(self) -> bool:
        """Maintainable from per-group sums of the deltas alone."""
        return self.func in ("count", "sum", "avg") and not self.distinct and self.sql is None

    def __str__(self) -> str:
        if self.sql is not None:
            return f"{self.sql} AS {self.name}"
        inner = "*" if self.arg is None else ("DISTINCT " if self.distinct else "") + self.arg
        return f"{self.func.upper()}({inner}) AS {self.name}"


@dataclass(frozen=True, eq=False)
class Grouping(Unary):
    """An operator over groups of its input by ``keys`` with aggregates ``aggs``."""

    keys: tuple[str, ...]
    aggs: tuple[AggCall, ...]

    @property
    def columns(self) -> tuple[str, ...]:
        return self.keys + tuple(a.name for a in self.aggs)

    def label(self) -> str:
        return f"{type(self).__name__} by [{', '.join(self.keys)}] {', '.join(map(str, self.aggs))}"


@dataclass(frozen=True, eq=False)
class Aggregate(Grouping):
    """GROUP BY ``keys``; one output row per group present. No keys: exactly one row."""


@dataclass(frozen=True, eq=False)
class Window(Unary):
    """Window functions: the input's rows, each with one more column per function.

    ``funcs`` are Spark SQL window expressions over the input's columns, all partitioned
    at least by the ``partition`` columns, so each partition is computed on its own;
    ``keep`` (over the output columns) drops rows, which makes top-k a Window that
    stores only the k rows it keeps.
    """

    partition: tuple[str, ...]
    funcs: tuple[tuple[str, str], ...]
    keep: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        return self.input.columns + tuple(n for n, _ in self.funcs)

    def label(self) -> str:
        return "Window " + _window_label(self.partition, self.funcs, self.keep)


def _window_label(partition: tuple[str, ...], funcs: tuple[tuple[str, str], ...], keep: str | None) -> str:
    shown = ", ".join(f"{e} AS {n}" for n, e in funcs)
    return f"by [{', '.join(partition)}] {shown}" + (f" keep {keep}" if keep else "")


def distinct(op: Operator) -> Aggregate:
    """SELECT DISTINCT is a GROUP BY every column with no aggregates."""
    return Aggregate(op, op.columns, ())


# --- operators that appear only in incremental circuits -------------------------------


@dataclass(frozen=True, eq=False)
class Integral(Unary):
    """I: the running sum of its input over all ticks so far — the persisted state.

    With ``key`` None the input is a Z-set; otherwise it is an additive table keyed by
    ``key`` (possibly no columns: one global group) whose other columns are summed.
    """

    key: tuple[str, ...] | None = None

    def label(self) -> str:
        return "I" + ("" if self.key is None else f" (sums by [{', '.join(self.key)}])")


@dataclass(frozen=True, eq=False)
class Delay(Unary):
    """z⁻¹ of an integral: its value at the end of the previous tick."""

    input: Integral

    def label(self) -> str:
        return "z⁻¹"


@dataclass(frozen=True, eq=False)
class Partials(Grouping):
    """Per-group sums of a Z-set delta for linear aggregates (linear in the delta). A SUM
    or AVG of a floating-point column has the :func:`nonfinite_columns` too, after its
    :func:`partial_columns`: which it has depends on the column's type, known when the
    delta is."""

    @property
    def columns(self) -> tuple[str, ...]:
        return self.keys + (COUNT,) + tuple(c for a in self.aggs for c in partial_columns(a))


def partial_columns(agg: AggCall) -> tuple[str, ...]:
    """The summable columns that a linear aggregate is finalized from."""
    if agg.func == "count":
        return () if agg.arg is None else (f"{agg.name}__n",)
    return (f"{agg.name}__s", f"{agg.name}__n")


def nonfinite_columns(agg: AggCall) -> tuple[str, str, str]:
    """The weighted counts of NaN, +Infinity and -Infinity beside a floating-point SUM or
    AVG's sum of its finite values: a running sum cannot take back a NaN or an infinity it
    has added (x - x is NaN for them), counts can (as Materialize keeps float sums)."""
    return (f"{agg.name}__nan", f"{agg.name}__pinf", f"{agg.name}__ninf")


@dataclass(frozen=True, eq=False)
class Recompute(Operator):
    """D(f(I(x))) for an f computed per group: only the groups ``delta`` touches are
    recomputed, from ``before`` (z⁻¹ of the input's integral) plus the delta. It is itself
    a state node: it keeps the integral of its own output, to retract exactly the rows
    it emitted for those groups."""

    delta: Operator
    before: Operator  # z⁻¹ of an integral, maybe under a projection

    @property
    def inputs(self) -> tuple[Operator, ...]:
        return (self.delta, self.before)


@dataclass(frozen=True, eq=False)
class GroupDiff(Recompute):
    """An aggregate's change. ``delta`` is ``Partials`` when every aggregate is linear
    (``before`` then holds per-group sums), else the raw Z-set delta."""

    keys: tuple[str, ...]
    aggs: tuple[AggCall, ...]

    @property
    def linear(self) -> bool:
        return isinstance(self.delta, Partials)

    @property
    def columns(self) -> tuple[str, ...]:
        return self.keys + tuple(a.name for a in self.aggs)

    def label(self) -> str:
        how = "from partial sums" if self.linear else "re-aggregating touched groups"
        return f"GroupDiff by [{', '.join(self.keys)}] {', '.join(map(str, self.aggs))} ({how})"


@dataclass(frozen=True, eq=False)
class WindowDiff(Recompute):
    """A Window's change: the touched partitions' rows, recomputed."""

    partition: tuple[str, ...]
    funcs: tuple[tuple[str, str], ...]
    keep: str | None

    @property
    def columns(self) -> tuple[str, ...]:
        return self.delta.columns + tuple(n for n, _ in self.funcs)

    def label(self) -> str:
        return "WindowDiff " + _window_label(self.partition, self.funcs, self.keep)


# --- helpers -------------------------------------------------------------------------


def with_inputs(op: Operator, inputs: tuple[Operator, ...]) -> Operator:
    """``op`` over ``inputs`` (in the order of :attr:`Operator.inputs`)."""
    if inputs == op.inputs:
        return op
    if isinstance(op, Plus):
        return Plus(inputs)
    names = [f.name for f in fields(op) if isinstance(getattr(op, f.name), Operator)]
    return replace(op, **dict(zip(names, inputs)))


def passthrough(columns: tuple[str, ...] | list[str]) -> tuple[tuple[str, str], ...]:
    """``Map`` expressions that keep ``columns`` as they are (and drop the others)."""
    return tuple((c, quote(c)) for c in columns)


def quote(name: str) -> str:
    """A Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


#: a literal a Map may add beside its columns
_CONSTANT = re.compile(r"(?i)TRUE|FALSE|NULL|-?\d+(\.\d*)?")


def is_identifier(text: str) -> bool:
    """True for a bare quoted column reference such as ```a`` ``."""
    return len(text) >= 2 and text[0] == text[-1] == "`" and "`" not in text[1:-1].replace("``", "")


def walk(*roots: Operator, stop: AbstractSet[str] = frozenset()) -> Iterator[Operator]:
    """Every node reachable from ``roots``, inputs before consumers, each once; the inputs
    of a node in ``stop`` (ids) are not followed."""
    seen: set[str] = set()
    order: list[Operator] = []

    def visit(node: Operator) -> None:
        stack: list[tuple[Operator, bool]] = [(node, False)]
        while stack:
            op, expanded = stack.pop()
            if op.id in seen:
                continue
            if expanded:
                seen.add(op.id)
                order.append(op)
                continue
            stack.append((op, True))
            if op.id not in stop:
                stack.extend((i, False) for i in reversed(op.inputs) if i.id not in seen)

    for root in roots:
        visit(root)
    return iter(order)


@dataclass
class _Printer:
    lines: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)


def explain(*roots: Operator, note: Callable[[Operator], str | None] | None = None) -> str:
    """The circuit as text, one node a line, shared nodes printed once and referenced;
    ``note`` adds what it says of a node after ``|`` on its line."""
    uses: dict[str, int] = {}
    for op in walk(*roots):
        for i in op.inputs:
            uses[i.id] = uses.get(i.id, 0) + 1
    p = _Printer()

    def show(op: Operator, depth: int) -> None:
        pad = "  " * depth
        if op.id in p.names:
            p.lines.append(f"{pad}-> {p.names[op.id]}")
            return
        tag = ""
        if uses.get(op.id, 0) > 1 or isinstance(op, Integral):
            p.names[op.id] = f"#{len(p.names) + 1}"
            tag = f"{p.names[op.id]} "
        said = note(op) if note is not None else None
        p.lines.append(f"{pad}{tag}{op.label()}" + (f"  | {said}" if said else ""))
        for i in op.inputs:
            show(i, depth + 1)

    for root in roots:
        show(root, 0)
    return "\n".join(p.lines)
