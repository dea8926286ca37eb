"""A project: streaming models deployed at one state location, ticked together.

``advance()`` is one tick of all models: read every source (:mod:`.inputs`), update the
pipeline, write the tick's outputs (:mod:`.outputs`) before it commits, then publish. After
it, each ``streaming_view``'s catalog view is redefined over the committed state and each
``changelog_table`` has the tick's changes appended, so all models agree at every committed
tick. A redeploy builds the new pipeline aside (:func:`.models.define`) and swaps it in only
once it is whole.

An instance lives for one invocation (a ``dbt run``); at its end it is set down, and the
next invocation in the process at the same location takes it up when its state location
is as it left it (:meth:`Project.take_up`), so that runs made by ``dbtRunner`` one after
another do not define the circuit again each time.
"""
from __future__ import annotations

import atexit
import re
import threading
import time
from dataclasses import asdict
from datetime import datetime
from typing import AbstractSet, Any, Callable, Mapping, Sequence

from pyspark.sql import SparkSession

from ..catalog import Catalog
from ..connectors.kafka import KafkaSettings, KafkaSource
from ..errors import ModelFailed, StateError
from ..runtime.pipeline import Pipeline
from ..sql.relations import engine_name
from .inputs import Inputs
from .models import CHANGELOG_TABLE, STREAMING_VIEW, Model, define, topological
from .outputs import Outputs
from .report import TickReport


#: projects whose invocation (a ``dbt run`` in this process) ended, by state location, with
#: their footprint there (:meth:`Project.set_down`); the oldest beyond :data:`SET_DOWN_MOST`
#: are closed (each keeps Kafka clients and mapped runs)
_SET_DOWN: dict[str, tuple[Project, tuple[str, ...]]] = {}
SET_DOWN_MOST = 4
_SET_DOWN_LOCK = threading.Lock()


class Project:
    """The deployed models at ``state_location`` and the pipeline that maintains them.

    One writer at a time: calls are serialized by a lock, and the state location must not be
    shared with another running project.
    """

    def __init__(self, spark: SparkSession, state_location: str, *, kafka: KafkaSettings | None = None,
                 max_records: int | None = None):
        self.spark = spark
        self.location = state_location
        self.settings = (kafka, max_records)
        self._sound = True  # no tick failed half-way in this instance (see set_down)
        self._lock = threading.RLock()
        self.pipe = Pipeline(spark, state_location)
        notes = self.pipe.notes
        self.models: dict[str, Model] = {rel: Model.from_json({"relation": rel, **m})
                                         for rel, m in notes.get("models", {}).items()}
        self.streams: dict[str, KafkaSource] = {d["relation"]: KafkaSource.from_json(d) for d in notes.get("kafka", [])}
        self.inputs = Inputs(spark, self.pipe, kafka, max_records)
        self.catalog = Catalog(spark)
        self.outputs = Outputs(spark, self.catalog, state_location, kafka)
        self._published = -1  # the tick the catalog views show, as far as this instance knows
        self._timed = False  # whether a run_model ticked: the time moves once per dbt run
        self.last: TickReport | None = None
        #: told each tick's report as soon as its manifest commits, before the catalog views
        #: are published: a tick nobody was told about is never committed
        self.on_commit: Callable[[TickReport], None] | None = None
        #: told a tick's report once it knows what the tick reads (offsets, lag, whether it is
        #: redone), before any model is computed: the lag of a tick in flight is known
        self.on_read: Callable[[TickReport], None] | None = None
        self.dropped: dict[str, str] = {}
        self._define(self.models, self.streams)

    @classmethod
    def take_up(cls, spark: SparkSession, state_location: str, *, kafka: KafkaSettings | None = None,
                max_records: int | None = None) -> Project:
        """The project at ``state_location`` for a new invocation: the one an earlier
        invocation of this process set down (:meth:`set_down`), when it was opened alike on
        this Spark session and nothing changed the location since (another process's tick,
        redo or open); else one opened anew. Opening defines the circuit again (Spark
        analyses each model and table: 0.2 s for a small project), a small tick's worth,
        for every ``dbt run`` made by ``dbtRunner`` in one process."""
        with _SET_DOWN_LOCK:
            kept = _SET_DOWN.pop(state_location, None)
        if kept is not None:
            project, footprint = kept
            try:
                if project.settings == (kafka, max_records) \
                        and project.spark._jsparkSession.equals(spark._jsparkSession) \
                        and project.pipe.store.footprint() == footprint:
                    project.new_invocation()
                    return project
            except Exception:  # its session or location went: open anew
                pass
            _close_quietly(project)
        return cls(spark, state_location, kafka=kafka, max_records=max_records)

    def set_down(self) -> None:
        """End an invocation: keep the project for the next one at this location in this
        process (:meth:`take_up`), or close it when a tick failed half-way in it."""
        try:
            if not self._sound:
                raise StateError("a tick failed half-way")
            footprint = self.pipe.store.footprint()
        except Exception:  # or the location went: nothing to take up
            _close_quietly(self)
            return
        with _SET_DOWN_LOCK:
            atexit.unregister(close_set_down)  # registered last: at exit it runs before Spark stops
            atexit.register(close_set_down)
            before = _SET_DOWN.pop(self.location, None)
            gone = [before[0]] if before is not None and before[0] is not self else []
            _SET_DOWN[self.location] = (self, footprint)
            while len(_SET_DOWN) > SET_DOWN_MOST:
                gone.append(_SET_DOWN.pop(next(iter(_SET_DOWN)))[0])
        for project in gone:
            _close_quietly(project)

    def new_invocation(self) -> None:
        """What a fresh instance does anew for each ``dbt run``: the time moves, Kafka
        sources are read to their new end, and the catalog views are published once (dbt or
        a user may have dropped them in between)."""
        with self._lock:
            self._timed, self._published = False, -1
            self.inputs.new_invocation()
            self.catalog.recheck()

    # --- definition --------------------------------------------------------------------

    def deploy(self, model: Model, *, streams: Sequence[KafkaSource] = (), full_refresh: bool = False) -> str:
        """Add or replace a model; its state is built at the next :meth:`advance`.

        ``streams`` declares the Kafka sources it reads (a relation read by a model that is
        neither a model nor a stream is a table source). Returns what happens to the model:
        ``created``, ``rebuilt`` (its SQL changed: its state and its dependents' are rebuilt
        from retained input), ``reset`` (``full_refresh``: its own state is rebuilt) or
        ``unchanged``.
        """
        with self._lock:
            old = self.models.get(model.relation)
            action = "created" if old is None else "unchanged" if old == model else "rebuilt"
            changed = [s for s in streams if self.streams.get(s.relation) != s]
            if changed or action != "unchanged":
                before = self.streams
                self._define({**self.models, model.relation: model}, {**before, **{s.relation: s for s in changed}},
                             deploying=model.relation, reread={s.relation for s in changed} if full_refresh else set())
                self.inputs.forget(streams={s.relation for s in changed  # another topic: read it from its start
                                            if s.relation in before and before[s.relation].topic != s.topic})
            if full_refresh and action == "unchanged":
                action = "reset"
                self.pipe.reset(model.name)
            if model.kind == CHANGELOG_TABLE and action != "unchanged":
                self.outputs.new_logs.add(model.relation)
            return action

    def run_model(self, model: Model, streams: Sequence[KafkaSource] = (), *, full_refresh: bool = False,
                  keep: AbstractSet[str] | None = None) -> dict[str, Any]:
        """What ``dbt run`` does for one streaming model: drop models not in ``keep`` (once per
        invocation), deploy this one, tick until every source is caught up (to the end this
        instance saw first: one ``dbt run`` sees one frontier). Returns what
        happened (``action``, ``tick``, a one-line ``message``, the ``ticks``' reports) and
        models ``dropped`` because they no longer compile."""
        with self._lock:
            if keep is not None:
                self.prune(set(keep) | {model.relation})
            action = self.deploy(model, streams=[s for s in streams if s.relation in model.reads],
                                 full_refresh=full_refresh)
            ticked = more = self.advance(time_moves=not self._timed)
            self._timed |= ticked
            dead, reports = 0, []
            while True:  # max_records: as many ticks as it takes to catch up
                if more and self.last:
                    dead += sum(self.last.dead.values())
                    reports.append(asdict(self.last))
                if not self.behind:
                    break
                more = self.advance(time_moves=False)
            dropped, self.dropped = dict(self.dropped), {}
            failed = self.failed.get(model.relation)
            if failed is not None:
                raise ModelFailed(f"failed on its input at tick {self.tick}: {failed}. It keeps its contents of "
                                  f"the last tick it computed, the other models went on; once the offending rows "
                                  f"are deleted or updated, or the model is changed, a run rebuilds it from "
                                  f"retained input")
            message = _said(action, self.tick, ticked, reports, dead)
            return {"action": action, "tick": self.tick, "message": message, "dropped": dropped, "ticks": reports}

    @property
    def failed(self) -> dict[str, str]:
        """Models whose SQL failed on their input, and the models reading them: relation →
        the error. They keep their contents of the last tick they computed (see
        :attr:`Pipeline.failed`)."""
        relations = {engine_name(rel): rel for rel in self.models}
        return {relations.get(n, n): re.sub(r"^reads (\S+),", lambda m: f"reads {relations.get(m[1], m[1])},", e)
                for n, e in self.pipe.failed.items()}

    def prune(self, keep: set[str]) -> list[str]:
        """Remove models not in ``keep`` (no longer streaming models of the project); their
        state goes at the next tick, their relations stay as they are."""
        with self._lock:
            gone = [rel for rel in self.models if rel not in {k.lower() for k in keep}]
            if gone:
                self._define({rel: m for rel, m in self.models.items() if rel not in gone}, self.streams)
            return gone

    def _define(self, models: dict[str, Model], streams: dict[str, KafkaSource], deploying: str | None = None,
                reread: AbstractSet[str] = frozenset()) -> None:
        """Rebuild the pipeline for ``models`` and ``streams`` (see :func:`.models.define`),
        and swap it in once it is whole: if anything fails, the project is as it was."""
        self.catalog.forget()  # a redefinition may have had dbt drop or replace catalog views
        new = define(self.spark, self.location, self.pipe.notes, models, streams, self.inputs.table,
                     deploying=deploying, reread=reread)
        self.pipe.close()
        self.pipe, self.models, self.streams = new.pipe, new.models, new.streams
        self.inputs.forget(new.reread_streams, new.reread_tables)
        self.dropped.update(new.dropped)

    # --- running -----------------------------------------------------------------------

    def advance(self, now: datetime | None = None, *, time_moves: bool = True) -> bool:
        """One tick: read every source's changes, update all models, commit, publish.

        Kafka sources are read to their end once per Project instance (one ``dbt run``), at
        most ``max_records`` records per source and tick. Returns False (and commits nothing)
        when there is nothing to do: no source changed, no model to build, and no model
        reading the time or not ``time_moves`` (one ``dbt run`` moves the time once, with
        its first model, not once per model). :attr:`last` tells what the tick read and wrote.
        """
        with self._lock:
            started = time.monotonic()
            tick = self.pipe.tick + 1
            self._sound = False
            report = TickReport(tick)
            read = self.inputs.read(self.pipe, self.table_sources, [self.streams[r] for r in self.stream_sources],
                                    report)
            try:
                report.redone = read.redone
                idle = not read.deltas and not read.dead and not self.pipe.pending and not (
                    self.pipe.reads_time and time_moves)
                if idle and self.pipe.tick > 0:
                    self.inputs.idle(self.pipe, tick, read)
                    if self._published != self.tick:
                        self._publish()
                    self._sound = True
                    return False
                self.pipe.notes = {
                    "models": {rel: {k: v for k, v in m.to_json().items() if k != "relation"}
                               for rel, m in self.models.items()},
                    "kafka": [self.streams[rel].to_json() for rel in self.stream_sources],
                    **self.inputs.positions(read),
                }
                self.inputs.intend(self.pipe, tick, read)
                report.split["read"] = time.monotonic() - started
                if self.on_read is not None:
                    self.on_read(report)
                self.pipe.step(read.deltas, now, before_commit=lambda tick, changes: self.outputs.write(
                    tick, self.models, changes, self.streams, read.dead, report))
                assert self.pipe.last_tick is not None  # set by every step that returns
                report.split.update(self.pipe.last_tick.seconds)
                report.path, report.why = self.pipe.last_tick.path, self.pipe.last_tick.why
                report.failed = self.failed
                report.seconds = time.monotonic() - started
                self.last = report
                if self.on_commit is not None:
                    self.on_commit(report)
            finally:
                read.release()
            self.inputs.committed(self.pipe, tick, read)
            self.outputs.new_logs.clear()
            publishing = time.monotonic()
            self._publish()
            report.split["publish"] = time.monotonic() - publishing
            self._sound = True
            return True

    def new_frontier(self) -> None:
        """Let the next :meth:`advance` read Kafka sources up to their new end (by default an
        instance reads each to its end once: one ``dbt run`` sees one frontier)."""
        with self._lock:
            self.inputs.caught_up.clear()

    @property
    def table_sources(self) -> list[str]:
        """Relations models read that are neither models nor Kafka sources: diffed every tick."""
        return list(dict.fromkeys(r for m in self.models.values() for r in m.reads
                                  if r not in self.models and r not in self.streams))

    @property
    def stream_sources(self) -> list[str]:
        """Kafka sources models read."""
        return list(dict.fromkeys(r for m in self.models.values() for r in m.reads if r in self.streams))

    @property
    def behind(self) -> bool:
        """Whether a Kafka source has records left this instance has not read (``max_records``)."""
        return self.inputs.behind(self.stream_sources)

    def _publish(self) -> None:
        """Point every streaming view's and Kafka source's catalog view at the committed state
        (once per tick)."""
        self._published = self.tick
        views = [self.catalog.ensure_schema(rel) for rel in self.stream_sources]  # dbt creates only models' schemas
        views += [m.relation for m in self.models.values() if m.kind == STREAMING_VIEW]
        self.catalog.publish({rel: (self.pipe.contents.sql(engine_name(rel)), self.pipe.schema(engine_name(rel)))
                              for rel in views})

    # --- reading -----------------------------------------------------------------------

    @property
    def tick(self) -> int:
        return self.pipe.tick

    def ordered(self) -> list[Model]:
        """The models, each after the models they read."""
        return topological(self.models)

    def close(self) -> None:
        self.pipe.close()
        self.inputs.close()
        self.outputs.close()


def _said(action: str, tick: int, ticked: bool, reports: Sequence[Mapping[str, Any]], dead: int) -> str:
    """What ``dbt run`` prints for a streaming model: what happened to its definition (a
    model whose SQL did not change is UPDATED by a tick that read something), and what the
    run's ticks read."""
    records = sum(n for r in reports for n in r["rows_in"].values())
    read = ([f"{records} new records"] if records else []) + [
        f"table {rel} ({how})" for rel, how in dict(kv for r in reports for kv in r["tables"].items()).items()]
    if dead:
        read.append(f"{dead} records to dead letters")
    verb = action.upper() if action != "unchanged" else "UPDATED" if ticked else "UNCHANGED"
    return f"{verb} at tick {tick}" + (f": read {', '.join(read)}" if read else "") + ("" if ticked else
                                                                                         " (up to date)")


def close_set_down() -> None:
    """Close the projects no invocation took up (their Kafka clients, mapped runs and
    merges): at exit, or when this process is done with them."""
    with _SET_DOWN_LOCK:
        kept = [project for project, _ in _SET_DOWN.values()]
        _SET_DOWN.clear()
    for project in kept:
        _close_quietly(project)


def _close_quietly(project: Project) -> None:
    """Close a set-down project no invocation takes up (its session may be gone)."""
    try:
        project.close()
    except Exception:  # a stopped session's cached frames, a broker gone: nothing left to keep
        pass
