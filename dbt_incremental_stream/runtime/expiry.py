"""Rows that leave state for good as the time moves: a retention bound per trace.

The time views read never goes back, so a row that every reader of its state sees only
through temporal filters, and that lies below all their windows' lower edges, is false
for good (:class:`.arranged.Expiry` says which rows, for a time). It leaves that state at
the tick its last window closes. Per state node, the ordinal of the threshold it was cut
at is recorded with each tick (the manifest's meta ``expired``): :class:`Retention` holds
those bounds, cuts each tick's state deltas to them (in Arrow on arrangements, or as
DataFrames), and refuses a view added later that would read rows already gone.
"""
from __future__ import annotations

from datetime import datetime
from typing import Callable, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..circuit.operators import WEIGHT, Input, Operator, walk
from ..errors import StreamError
from .arrow import kernels
from .spark import zsets
from .plan import Expiry, Plan
from .storage.state import StateStore


def ordinal_of(expiry: Expiry, clock: datetime | None) -> int:
    """The ordinal of an expiry's threshold at ``clock`` (the lowest, when none)."""
    t = expiry.threshold(clock) if clock is not None else None
    return kernels.ordinal(t) if t is not None else -(1 << 63)


class Retention:
    """Per state node, the ordinal below which its rows have left it for good."""

    def __init__(self, expired: Mapping[str, int]):
        self.expired = dict(expired)

    def thresholds(self, plan: Plan | None, clock: datetime | None) -> dict[str, tuple[pa.Scalar, int]]:
        """Per state node rows leave as the time moves: the value (and its ordinal) below
        which a row is outside every reader's window at ``clock`` and after."""
        out = {}
        for node, expiry in (plan.expiry.items() if plan is not None and clock is not None else ()):
            if (t := expiry.threshold(clock)) is not None:  # type: ignore[arg-type]
                known = self.expired.get(node)
                at = kernels.ordinal(t)
                out[node] = (t, at) if known is None or at >= known else (kernels.from_ordinal(known, t.type), known)
        return out

    def cut_arrow(self, plan: Plan, tables: dict[str, pa.Table | None], clock: datetime | None,
                  live: Sequence[str], store: StateStore, schema_of: Callable[[str], pa.Schema]) -> dict[str, int]:
        """This tick's state deltas (of the ``live`` nodes, stored as ``schema_of`` says) without
        the rows that left every window for good: rows of the delta below the threshold
        (or NULL) are not stored, and stored rows between the last threshold and this one
        are retracted, read by range from the arrangement ordered by the column. Returns
        every node's threshold."""
        expired = dict(self.expired)
        for node, (t, at) in self.thresholds(plan, clock).items():
            if node not in live:
                continue  # set aside with a failed view
            column = plan.expiry[node].column
            delta = tables.get(node)
            tables[node] = kernels.concat([None if delta is None else kept(delta, column, t),
                                           self.gone(plan, node, t, store, schema_of(node))])
            expired[node] = at
        return expired

    def gone(self, plan: Plan, node: str, threshold: pa.Scalar, store: StateStore, schema: pa.Schema
             ) -> pa.Table | None:
        """The retraction of a node's stored rows between the threshold it was last cut at
        and ``threshold``, read by range from its arrangement ordered by the column (none
        on the node's first tick), as stored (``schema``); None when there are none."""
        column = plan.expiry[node].column
        arr = store.arrangements.get(node, {}).get((kernels.ORDERED, column))
        at = kernels.ordinal(threshold)
        if arr is None or at == self.expired.get(node):
            return None
        assert store.runs is not None
        low = (kernels.from_ordinal(self.expired[node], threshold.type) if node in self.expired
               else kernels.lowest(threshold.type))
        found = store.runs.ranges(arr, [(low, threshold)])
        if found is None:
            return None
        found = kernels.consolidate(found.filter(pc.less(found.column(column), threshold)))
        return kernels.negate(found.select(schema.names).cast(schema)) if found.num_rows else None

    def cut_frames(self, plan: Plan | None, frames: dict[str, DataFrame], before: Mapping[str, DataFrame | None],
                   clock: datetime | None, live: Sequence[str], merge: Callable[[str, DataFrame], DataFrame]
                   ) -> dict[str, int]:
        """:meth:`cut_arrow` on the DataFrame path: every stored row below the threshold
        (or NULL) is retracted, whatever the last threshold was (``merge`` consolidates
        a node's union of batches)."""
        expired = dict(self.expired)
        for node, (t, at) in self.thresholds(plan, clock).items():
            assert plan is not None
            if node not in live:
                continue  # set aside with a failed view
            c = zsets.col(plan.expiry[node].column)
            gone = c.isNull() | (c < F.lit(t.as_py()))
            parts = [frames[node].where(~gone)] if node in frames else []
            if before.get(node) is not None:
                parts.append(before[node].where(gone).withColumn(WEIGHT, -zsets.col(WEIGHT)))  # type: ignore[union-attr]
            frames[node] = merge(node, zsets.union(parts))  # type: ignore[arg-type]
            expired[node] = at
        return expired

    def check(self, plan: Plan | None, new: Sequence[tuple[str, Operator]], sources: Mapping[str, str],
              clock: datetime | None) -> None:
        """Refuse to build the ``new`` views (name, state) that would read rows which left
        a state for good (below its recorded threshold) while they are not outside their
        windows. ``sources``: the state node of each source's retained input → its name."""
        for node, at in self.expired.items():
            kept = plan is not None and node in plan.expiry and ordinal_of(plan.expiry[node], clock) >= at
            source = sources.get(node)
            readers = sorted(name for name, state in new if (
                not kept and any(o.id == node for o in walk(state))
                or source is not None and _sees(plan, state, node, source, at, clock)))
            if readers:
                what = f"source {source!r}" if source is not None else f"state {node}"
                raise StreamError(f"views {readers} would read rows of {what} that left the state at an earlier tick, "
                                  f"when every view read them through a temporal filter whose window they had left; "
                                  f"deploy these views at a new state location, "
                                  f"which reads the sources from their start")


def kept(delta: pa.Table, column: str, threshold: pa.Scalar) -> pa.Table:
    """A state delta's rows at or above ``threshold`` in ``column`` (NULL: below): the
    others have left every window for good and are not stored."""
    return delta.filter(pc.fill_null(pc.greater_equal(delta.column(column), threshold), False))


def _sees(plan: Plan | None, root: Operator, node: str, source: str, at: int, clock: datetime | None) -> bool:
    """Whether ``root`` reads rows of ``source`` (retained as state ``node``) other than
    through a temporal filter whose lower edge on the expired column is at least ``at``
    (a backfill replays the source's retained input through it)."""
    column = plan.expiry[node].column if plan is not None and node in plan.expiry else None
    seen: set[str] = set()

    def reaches(op: Operator) -> bool:
        if op.id in seen:
            return False
        seen.add(op.id)
        if isinstance(op, Input):
            return op.name == source
        guard = plan.guards.get(op.id) if plan is not None else None
        inputs = op.inputs
        if guard is not None and guard[0] == source and guard[1].column == column \
                and ordinal_of(guard[1], clock) >= at:
            inputs = inputs[1:]  # the rows side is guarded: only the clock's is read whole
        return any(reaches(i) for i in inputs)

    return reaches(root)
