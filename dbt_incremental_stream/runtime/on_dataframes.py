"""A tick computed by the DataFrame evaluator (:mod:`.evaluate`): Spark jobs over the
delta and the state's whole batches. The path of a circuit with no arranged form, of a
tick the arranged path declines (an expression only Spark computes exactly in a task, a
data error to name), and of every tick under ``placement='dataframe'`` (the twin of the arranged path in the tests).
The tick's batches are written before the pipeline commits it
(:meth:`~.pipeline.Pipeline._commit`).
"""
from __future__ import annotations

import time
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Callable, Mapping, cast

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from ..circuit.operators import Integral, Partials, Recompute
from .spark import zsets
from .spark.session import empty_frame
from .plan import Plan
from .circuit import View
from .spark.evaluate import Tick
from .storage.state import Batch
from .ticks import Changes, State, TickStats, ViewsFailed, data_error

if TYPE_CHECKING:
    from .on_arrangements import ArrangedTicks
    from .pipeline import Pipeline


def merge(state: State, batches: DataFrame) -> DataFrame:
    """Any union of batches of ``state`` as one: a consolidated Z-set, or sums per key."""
    if isinstance(state, Integral) and state.key is not None:
        return zsets.sum_by(batches, state.key)
    return zsets.consolidate(batches)


def change(spark: SparkSession, view: View, batches: list[Batch]) -> DataFrame:
    """A view's change from the batches of its state a tick wrote."""
    frames = [b.open(spark) for b in batches]
    if not frames:
        return empty_frame(spark, zsets.with_weight(view.schema))
    return frames[0] if len(frames) == 1 else zsets.consolidate(zsets.union(frames))  # type: ignore[arg-type]


def _state_delta(tick: Tick, state: State) -> DataFrame | None:
    """What a state node adds this tick: its input's delta, or a recompute's own output."""
    return tick.value(state.input if isinstance(state, Integral) else state)


def _fold(state: State, delta: DataFrame) -> DataFrame:
    """A tick's delta as stored. A recompute's output and per-group partial sums come out
    of a group-by already: no second shuffle."""
    if isinstance(state, Recompute) or isinstance(state.input, Partials):
        return delta
    return merge(state, delta)


class DataFrameTicks:
    """The ticks of a :class:`~.pipeline.Pipeline` that the DataFrame evaluator computes."""

    def __init__(self, pipe: Pipeline, arranged: ArrangedTicks):
        self.pipe = pipe  # the commit the ticks end with
        self.arranged = arranged  # which builds the arrangements of the batches a tick wrote
        self.spark, self.store, self.circuit = pipe.spark, pipe.store, pipe.circuit

    def run(self, plan: Plan | None, inputs: dict[str, DataFrame | None], arrow: Mapping[str, pa.Table],
            clock: datetime | None, before_commit: Callable[[int, Changes], None] | None, started: float,
            aside: set[str], skip: Mapping[str, str], why: str | None) -> Changes:
        """One tick; the state nodes ``aside`` (of the views in ``skip``) are left as they
        are. ``why``: why the tick is not on arrangements."""
        c, retention = self.circuit, self.pipe._retention
        for source, table in arrow.items():
            inputs[source] = c.conform(source, zsets.arrow_frame(self.spark, table))
        every = c.states()
        states = [s for s in every if s.id not in aside]
        tick = self.store.tick + 1
        written: dict[str, list[Batch]] = {s.id: [] for s in every}  # the views set aside: as they are
        new = [s for s in states if not self.store.has(s.id)]
        built: set[str] = set()  # seeded with all input so far, this tick's included
        if new and self.store.tick > 0:
            unbuilt = [(v.name, v.state) for v in c.views.values() if not self.store.has(v.state.id)]
            retention.check(plan, unbuilt, {c.source_state(n).id: n for n in c.sources}, clock)
            self._backfill(new, tick, written, skip, inputs)
            built = {s.id for s in new}

        # fixed before any batch of this tick is written: Delay reads the previous tick
        before = {s.id: zsets.union([self.store.before(s.id)] + [b.open(self.spark) for b in written[s.id]])
                  for s in states}
        first = {s.id for s in states if not self.store.has(s.id) and not written[s.id]}
        same = c.same_state()
        run = Tick(inputs, lambda node: before[same.get(node, node)], first.__contains__, c.shared(),
                   empty=c.typed_empty())
        try:
            frames = {s.id: _fold(s, d) for s in states
                      if s.id not in built and (d := _state_delta(run, s)) is not None}
            by_id = {s.id: s for s in states}
            expired = retention.cut_frames(plan, frames, before, clock, list(by_id),
                                           lambda node, df: merge(by_id[node], df))
            batches = self._write(tick, frames, skip)
            for node, batch in batches.items():
                written[node].append(batch)
            # a view built this tick changes by all of its contents (its backfill and this delta)
            changed = {v.name: change(self.spark, v, written.get(v.state.id, [])) for v in c.views.values()}
            changes = Changes({name: partial(changed.__getitem__, name) for name in changed})
            arranging = time.perf_counter()
            arrangements = self.arranged.build(plan, written, tick) if plan is not None else {}
            outputs, computed = self.pipe._commit(tick, every, written, arrangements, changes,
                                                  self.pipe._meta(clock, expired, skip), before_commit)
        finally:
            run.release()
        self.pipe.last_tick = TickStats("dataframe", sum(t.num_rows for t in arrow.values()),
                                        {"spark": arranging - started, "arrange": outputs - arranging,
                                         "outputs": computed - outputs, "commit": time.perf_counter() - computed},
                                        why)
        return changes

    def _backfill(self, new: list[State], tick: int, written: dict[str, list[Batch]], skip: Mapping[str, str],
                  inputs: Mapping[str, DataFrame | None]) -> None:
        """Seed state nodes that did not exist at the last commit by replaying the
        retained input history and this tick's ``inputs`` through them as one delta, from
        empty state (a row that this tick deletes is never computed on)."""
        history: dict[str, DataFrame | None] = {}
        for name in self.circuit.sources:
            before, delta = self.store.before(self.circuit.source_state(name).id), inputs.get(name)
            # consolidated with this tick's delta: a row deleted now is not there
            history[name] = (before if delta is None
                             else zsets.consolidate(cast(DataFrame, zsets.union([before, delta]))))
        replay = Tick(history, lambda _: None, lambda _: True, self.circuit.shared(),
                      empty=self.circuit.typed_empty())
        try:
            frames = {s.id: _fold(s, d) for s in new if (d := _state_delta(replay, s)) is not None}
            for node, batch in self._write(tick, frames, skip).items():
                written[node].append(batch)
        finally:
            replay.release()

    def _write(self, tick: int, frames: dict[str, DataFrame], skip: Mapping[str, str]) -> dict[str, Batch]:
        """:meth:`StateStore.write`; when a view's SQL fails on the data, the views whose
        change fails, each computed alone (in the order they were added: a view reading a
        failed one is set aside with it, not computed), as :class:`.ViewsFailed`."""
        try:
            return self.store.write(tick, frames)
        except Exception as e:
            if data_error(e) is None:
                raise
            failed: dict[str, str] = {}
            same = self.circuit.same_state()
            for v in self.circuit.views.values():
                frame = frames.get(same.get(v.state.id, v.state.id))
                if frame is None or v.name in self.circuit.with_readers({**skip, **failed}):
                    continue
                try:
                    frame.write.format("noop").mode("overwrite").save()
                except Exception as probe:
                    if (why := data_error(probe)) is None:
                        raise
                    failed[v.name] = why
            if not failed:
                raise
            raise ViewsFailed(failed) from e
