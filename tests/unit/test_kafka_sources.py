"""Kafka sources through a Project: every envelope, bad records to the dead-letter table,
offsets committed with the tick (a new Project resumes after them)."""
from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from pyspark.sql.types import (DecimalType, DoubleType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from dbt_incremental_stream.connectors.kafka import KafkaSource
from dbt_incremental_stream.differential import check_project
from dbt_incremental_stream.errors import ConnectorError, ModelFailed
from dbt_incremental_stream.project import Model, Project
from dbt_incremental_stream.connectors.kafka import CLIENT_LOGS, KafkaSettings
from devkit.kafka import create_topics, produce

SCHEMA = StructType([StructField("id", LongType()), StructField("name", StringType()),
                     StructField("amount", DoubleType())])
VIEW = "SELECT name, COUNT(*) AS n, SUM(amount) AS total FROM {src} GROUP BY name"


def rows(spark, relation):
    return Counter(tuple(r) for r in spark.table(relation).collect())


@pytest.mark.parametrize("envelope", ["append", "upsert", "debezium", "insert_delete"])
def test_envelopes(spark, kafka, tmp_path, envelope):
    topic, src = f"t_{envelope}", f"raw_{envelope}.orders"
    create_topics(kafka, topic)
    source = KafkaSource(src, topic, SCHEMA, envelope=envelope, key=("id",) if envelope == "upsert" else ())
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS k_{envelope}")
    model = Model(f"k_{envelope}.totals", VIEW.format(src=src))
    want: Counter = Counter()

    def send(changes):
        """(row, +1/-1/None) in the envelope's terms; ``want`` follows along."""
        records = []
        for row, op in changes:
            doc = dict(zip(["id", "name", "amount"], row))
            if envelope == "append":
                records.append((None, doc))
                want[row] += 1
            elif envelope == "upsert":
                for old in [r for r in want if r[0] == row[0]]:
                    del want[old]
                records.append(({"id": row[0]}, None if op is None else doc))
                if op is not None:
                    want[row] += 1
            elif envelope == "debezium":
                before = next((dict(zip(["id", "name", "amount"], r)) for r in want if r[0] == row[0]), None)
                after = None if op is None else doc
                if before:
                    want[tuple(before.values())] -= 1
                if after:
                    want[row] += 1
                records.append((None, {"payload": {"before": before, "after": after, "op": "u"}}))
            else:
                records.append((None, {"insert" if op else "delete": doc}))
                want[row] += 1 if op else -1
        produce(kafka, topic, records)
        +want  # noqa: B018

    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}))
    project.deploy(model, streams=[source])
    send([((1, "a", 2.5), 1), ((2, "b", 1.0), 1), ((3, "a", None), 1)])
    project.advance()
    assert rows(spark, src) == +want
    assert not any(check_project(project).values())

    # a second process resumes after the committed offsets
    project.close()
    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}))
    if envelope == "append":
        send([((4, "c", 7.0), 1), ((1, "a", 2.5), 1)])
    elif envelope == "insert_delete":
        send([((1, "a", 2.5), 0), ((4, "c", 7.0), 1)])
    else:  # update id 1, delete id 2, add id 4
        send([((1, "z", 9.0), 1), ((2, "b", 1.0), None), ((4, "c", 7.0), 1)])
    project.advance()
    assert project.pipe.last_tick.path == "arranged", project.pipe.last_tick.why  # a small tick: on arrangements
    assert rows(spark, src) == +want
    assert not any(check_project(project).values())
    assert project.advance() is False  # nothing new: no tick
    project.close()


def test_bad_records_go_to_dead_letters(spark, kafka, tmp_path):
    create_topics(kafka, "t_bad", partitions=1)
    src = "raw_bad.orders"
    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}))
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_bad")
    project.deploy(Model("k_bad.totals", VIEW.format(src=src)), streams=[KafkaSource(src, "t_bad", SCHEMA)])
    produce(kafka, "t_bad", [(None, {"id": 1, "name": "a", "amount": 1.5}), (None, b"{not json"),
                             (None, {"id": "two", "name": "b", "amount": 1.0}), (None, {"id": 3, "name": "c"}),
                             (None, {"id": 4, "name": "d", "amount": 4})])
    project.advance()
    assert rows(spark, src) == Counter({(1, "a", 1.5): 1, (4, "d", 4.0): 1})
    dead = {r.offset: r.reason for r in spark.table(f"{src}__dead_letters").collect()}
    assert set(dead) == {1, 2, 3}
    assert "not JSON" in dead[1] and "'two' is not a bigint" in dead[2] and "missing field 'amount'" in dead[3]
    assert not any(check_project(project).values())
    project.close()


def test_missing_topic_names_the_source(spark, kafka, tmp_path):
    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}))
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_missing")
    project.deploy(Model("k_missing.v", "SELECT * FROM raw.nothing"),
                   streams=[KafkaSource("raw.nothing", "no_such_topic", SCHEMA)])
    with pytest.raises(ConnectorError, match="'raw.nothing'.*topic 'no_such_topic' does not exist"):
        project.advance()
    project.close()


def consume(bootstrap, topic, partitions=1):
    """Every committed message of a topic: (key, value, tick header)."""
    import json

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.partition.eof": True,
                  "isolation.level": "read_committed", **CLIENT_LOGS})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out, ends = [], 0
    while ends < partitions and (msg := c.poll(10)) is not None:
        if msg.error():
            ends += 1
            continue
        out.append((msg.key() and json.loads(msg.key()), msg.value() and json.loads(msg.value()),
                    dict(msg.headers())["dbt_stream_tick"]))
    c.close()
    return out


def test_sinks_mirror_changes_once(spark, kafka, tmp_path, monkeypatch):
    from dbt_incremental_stream.connectors.sinks import KafkaSink, TopicWriter

    create_topics(kafka, "s_in", "s_log", "s_upsert", partitions=1)
    src = "raw_sink.orders"
    settings = KafkaSettings({"bootstrap.servers": kafka})
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_sink")
    project = Project(spark, str(tmp_path / "state"), kafka=settings)
    stream = KafkaSource(src, "s_in", SCHEMA, envelope="upsert", key=("id",))
    project.deploy(Model("k_sink.log", VIEW.format(src=src), "changelog_table", KafkaSink("s_log")), streams=[stream])
    # the deploy's tick has no input: the changelog table exists, with no partition, and the
    # empty change is known in the driver (no Spark job writes the sink)
    with monkeypatch.context() as m:
        m.setattr(TopicWriter, "write_from_tasks", lambda *a: pytest.fail("an empty change written by tasks"))
        assert project.advance() and project.pipe.last_tick.path == "arranged"
    assert spark.table("k_sink.log").count() == 0 and not spark.sql("SHOW PARTITIONS k_sink.log").collect()
    project.new_frontier()
    project.deploy(Model("k_sink.totals", VIEW.format(src=src), sink=KafkaSink("s_upsert", "upsert", ("name",))),
                   streams=[stream])
    produce(kafka, "s_in", [({"id": 1}, {"id": 1, "name": "a", "amount": 1.0}),
                            ({"id": 2}, {"id": 2, "name": "b", "amount": 2.0})])
    project.advance()
    produce(kafka, "s_in", [({"id": 1}, {"id": 1, "name": "a", "amount": 5.0}), ({"id": 2}, None)])
    assert project.advance() is False  # one frontier per instance (per dbt run)
    project.new_frontier()
    assert project.advance()
    want = Counter(tuple(r) for r in spark.table("k_sink.totals").collect())
    # a partition per tick that changed the log (ticks 2 and 3; none for the deploy's tick 1)
    assert sorted(r[0] for r in spark.sql("SHOW PARTITIONS k_sink.log").collect()) == ["_tick=2", "_tick=3"]

    log: Counter = Counter()
    for _, value, _ in consume(kafka, "s_log"):
        (op, row), = value.items()
        log[(row["name"], row["n"], row["total"])] += 1 if op == "insert" else -1
    assert +log == want

    upserts = {}
    for key, value, _ in consume(kafka, "s_upsert"):
        upserts[key["name"]] = value
    assert {(v["name"], v["n"], v["total"]) for v in upserts.values() if v} == set(want)
    assert upserts["b"] is None

    # a tick redone after a crash between the sink's commit and the state's finds it written
    writer = project.outputs.writer("k_sink.log")
    assert writer.write("s_log", project.tick, [(None, b'{"insert": {"name": "dup"}}')]) == 0
    project.close()


@pytest.mark.parametrize("path", ["arranged", "tasks"])
def test_a_tick_redone_after_a_crash_between_partition_commits_writes_each_partition_once(
        spark, kafka, tmp_path, monkeypatch, path):
    """A tick stopped after its first partition's commit, then redone by a new Project (a
    restart): every partition of every sink holds each tick once, and the sinks fold to the
    views. On a large tick (in Spark tasks) tasks write the partitions, on a small one the
    driver."""
    from dbt_incremental_stream.connectors.sinks import AFTER_COMMIT, KafkaSink
    from dbt_incremental_stream.runtime import on_arrangements

    src, schema, state = f"raw_px_{path}.orders", f"px_{path}", str(tmp_path / "state")
    source_topic, totals_topic, rows_topic = f"px_{path}_in", f"px_{path}_totals", f"px_{path}_rows"
    create_topics(kafka, source_topic, partitions=1)
    create_topics(kafka, totals_topic, rows_topic, partitions=3)
    settings = KafkaSettings({"bootstrap.servers": kafka})
    spark.sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    stream = KafkaSource(src, source_topic, SCHEMA, envelope="upsert", key=("id",))
    project = Project(spark, state, kafka=settings)
    project.deploy(Model(f"{schema}.totals", VIEW.format(src=src), sink=KafkaSink(totals_topic, "upsert", ("name",))),
                   streams=[stream])
    project.deploy(Model(f"{schema}.rows", f"SELECT id, name, amount FROM {src}", sink=KafkaSink(rows_topic)),
                   streams=[stream])
    if path == "tasks":
        monkeypatch.setattr(on_arrangements, "ARRANGED_ROWS", -1)
    produce(kafka, source_topic, [({"id": i}, {"id": i, "name": f"n{i % 7}", "amount": float(i)}) for i in range(60)])
    assert project.advance()
    produce(kafka, source_topic, [({"id": i}, {"id": i, "name": f"n{i % 5}", "amount": i / 2}) for i in range(0, 60, 3)]
            + [({"id": i}, None) for i in range(1, 60, 4)])
    project.new_frontier()
    monkeypatch.setenv(AFTER_COMMIT, "fail")
    with pytest.raises(Exception, match="stopped after committing") as crash:
        project.advance()
    crashed = project.tick + 1
    project.close()
    monkeypatch.delenv(AFTER_COMMIT)
    before = _partition_ticks(kafka, totals_topic)
    # which partition the driver committed before it stopped, from its error: the test broker
    # (Tansu) shows aborted transactions to read_committed consumers, so the others' aborted
    # messages may be in `before` when they reached it before the abort
    stopped = {int(p) for p in re.findall(rf"{totals_topic}\[(\d+)\]", str(crash.value))}

    project = Project(spark, state, kafka=settings)  # a restart, which redoes the tick from its intent
    assert project.advance() and project.tick == crashed
    assert project.pipe.last_tick.path == path, project.pipe.last_tick.why
    after = _partition_ticks(kafka, totals_topic)
    written = stopped if path == "arranged" else {p for p, ticks in before.items() if crashed in ticks}
    redone = {p for p, ticks in after.items() if crashed in ticks}
    # the driver commits partitions in order and stops after the first; tasks commit theirs
    # side by side, each stopping after its own, so which committed first is the scheduler's
    assert written and (written < redone if path == "arranged" else written <= redone), "no crash after a commit"

    for topic in (totals_topic, rows_topic):  # each partition holds each tick once (one transaction)
        for p, ticks in _partition_ticks(kafka, topic).items():
            assert len(ticks) == len(set(ticks)), f"{topic}[{p}]: transactions of ticks {ticks}"
    upserts = {}
    for key, value, _ in consume(kafka, totals_topic, partitions=3):
        upserts[key["name"]] = value
    assert Counter((v["name"], v["n"], v["total"]) for v in upserts.values() if v) == rows(spark, f"{schema}.totals")
    log: Counter = Counter()
    for _, value, _ in consume(kafka, rows_topic, partitions=3):
        (op, row), = value.items()
        log[(row["id"], row["name"], row["amount"])] += 1 if op == "insert" else -1
    assert +log == rows(spark, f"{schema}.rows") and not -log
    project.close()


def test_a_sink_written_by_tasks_then_the_driver_writes_each_tick_once(spark, kafka, tmp_path, monkeypatch):
    """Small ticks (in the driver, which writes the sink) and large ones (in Spark tasks, which write it,
    with producers of the same transactional ids, fencing the driver's) in turn: the driver
    starts its producers again and every partition holds each tick once."""
    from dbt_incremental_stream.connectors.sinks import KafkaSink
    from dbt_incremental_stream.runtime import on_arrangements

    src, source_topic, sink_topic = "raw_turns.orders", "turns_in", "turns_out"
    create_topics(kafka, source_topic, partitions=1)
    create_topics(kafka, sink_topic, partitions=3)
    spark.sql("CREATE SCHEMA IF NOT EXISTS turns")
    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}))
    project.deploy(Model("turns.rows", f"SELECT id, name, amount FROM {src}", sink=KafkaSink(sink_topic)),
                   streams=[KafkaSource(src, source_topic, SCHEMA)])
    paths = []
    for tick, path in enumerate(["tasks", "arranged", "tasks", "arranged"]):
        monkeypatch.setattr(on_arrangements, "ARRANGED_ROWS", -1 if path == "tasks" else 100_000)
        produce(kafka, source_topic, [(None, {"id": i, "name": "n", "amount": 1.0})
                                      for i in range(tick * 9, tick * 9 + 9)])
        project.new_frontier()
        assert project.advance()
        paths.append(project.pipe.last_tick.path)
    assert paths == ["tasks", "arranged", "tasks", "arranged"]
    for p, ticks in _partition_ticks(kafka, sink_topic).items():
        assert len(ticks) == len(set(ticks)), f"{sink_topic}[{p}]: transactions of ticks {ticks}"
    got = Counter(tuple(v["insert"].values()) for _, v, _ in consume(kafka, sink_topic, partitions=3))
    assert got == rows(spark, "turns.rows") and sum(got.values()) == 36
    project.close()


def _partition_ticks(bootstrap, topic, partitions=3):
    """The tick of each committed transaction in each partition, in order (a transaction's
    messages have consecutive offsets; its commit marker takes the next one)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ticks-{topic}", "enable.partition.eof": True,
                  "isolation.level": "read_committed", **CLIENT_LOGS})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    out, last, ends = {p: [] for p in range(partitions)}, {}, 0
    while ends < partitions and (msg := c.poll(10)) is not None:
        if msg.error():
            ends += 1
            continue
        if last.get(msg.partition(), -2) != msg.offset() - 1:
            out[msg.partition()].append(int(dict(msg.headers())["dbt_stream_tick"]))
        last[msg.partition()] = msg.offset()
    c.close()
    return out


def test_changed_source_columns_need_a_full_refresh(spark, kafka, tmp_path):
    from pyspark.sql.types import DecimalType

    from dbt_incremental_stream.errors import StreamError

    create_topics(kafka, "t_retype", partitions=1)
    src, settings = "raw_retype.orders", KafkaSettings({"bootstrap.servers": kafka})
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_retype")
    model = Model("k_retype.totals", VIEW.format(src=src))
    project = Project(spark, str(tmp_path / "state"), kafka=settings)
    project.deploy(model, streams=[KafkaSource(src, "t_retype", SCHEMA)])
    produce(kafka, "t_retype", [(None, {"id": 1, "name": "a", "amount": 1.25}), (None, {"id": 2, "name": "a",
                                                                                         "amount": 2})])
    project.advance()
    retyped = KafkaSource(src, "t_retype", StructType(SCHEMA.fields[:2] + [StructField("amount", DecimalType(10, 2))]))
    with pytest.raises(StreamError, match="run with --full-refresh to read topic 't_retype' again"):
        project.deploy(model, streams=[retyped])
    assert project.deploy(model, streams=[retyped], full_refresh=True) == "reset"
    project.advance()
    assert [tuple(r) for r in spark.table("k_retype.totals").collect()] == [("a", 2, Decimal("3.25"))]
    assert not any(check_project(project).values())
    project.close()


def test_a_tick_redone_after_a_crash_reads_the_same_records(spark, kafka, tmp_path, monkeypatch):
    """The sink commits tick 2, the process dies before the state commits; more records
    arrive; the restarted project redoes tick 2 on exactly the records tick 2 had (the sink
    already holds it), then reads the rest as tick 3: the sink loses and repeats nothing."""
    from dbt_incremental_stream.connectors.sinks import KafkaSink
    from dbt_incremental_stream.runtime.storage.state import StateStore

    create_topics(kafka, "c_in", "c_out", partitions=2)
    src, settings = "raw_crash.orders", KafkaSettings({"bootstrap.servers": kafka})
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_crash")
    model = Model("k_crash.totals", VIEW.format(src=src), sink=KafkaSink("c_out"))
    stream = KafkaSource(src, "c_in", SCHEMA)
    project = Project(spark, str(tmp_path / "state"), kafka=settings)
    project.deploy(model, streams=[stream])
    produce(kafka, "c_in", [(None, {"id": i, "name": "ab"[i % 2], "amount": float(i)}) for i in range(6)])
    project.advance()

    produce(kafka, "c_in", [(None, {"id": i, "name": "abc"[i % 3], "amount": float(i)}) for i in range(6, 12)])
    project.new_frontier()

    def crash(*args, **kwargs):
        raise SystemExit("killed after the sink's commit, before the state's")

    with monkeypatch.context() as m:
        m.setattr(StateStore, "commit", crash)
        with pytest.raises(SystemExit):
            project.advance()
    project.close()

    produce(kafka, "c_in", [(None, {"id": i, "name": "cd"[i % 2], "amount": float(i)}) for i in range(12, 15)])
    project = Project(spark, str(tmp_path / "state"), kafka=settings)
    project.deploy(model, streams=[stream])
    assert project.advance() and project.tick == 2 and project.behind  # tick 2 again, same records
    assert project.advance() and project.tick == 3  # then the rest
    want = Counter(tuple(r) for r in spark.table("k_crash.totals").collect())
    got: Counter = Counter()
    for _, value, _ in consume(kafka, "c_out", partitions=2):
        (op, row), = value.items()
        got[(row["name"], row["n"], row["total"])] += 1 if op == "insert" else -1
    assert +got == want and sum(want.values()) == 4  # a, b, c, d
    project.close()


def test_an_expiring_source_keeps_only_rows_a_window_can_see(spark, kafka, tmp_path):
    """An upsert source declared ``expire`` keeps only the rows some model's window can
    still see; a late row is not stored, and an update or delete of a row that already
    left gives the batch answer."""
    create_topics(kafka, "t_exp", partitions=1)
    src = "raw_exp.readings"
    schema = StructType([StructField("id", LongType()), StructField("ts", TimestampType()),
                         StructField("v", DoubleType())])
    source = KafkaSource(src, "t_exp", schema, envelope="upsert", key=("id",), expire=True)
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_exp")
    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}))
    project.deploy(Model("k_exp.last_hour", f"SELECT id, v FROM {src} "
                                            f"WHERE ts > current_timestamp() - INTERVAL 1 HOUR"),
                   streams=[source])
    project.deploy(Model("k_exp.recent", f"SELECT COUNT(*) AS n, SUM(v) AS s FROM {src} "
                                         f"WHERE ts >= now() - INTERVAL 30 MINUTES"), streams=[source])
    t0 = datetime(2026, 3, 1, 12, 0)
    minute = timedelta(minutes=1)

    def send(changes):
        produce(kafka, "t_exp", [({"id": i}, None if ts is None else {"id": i, "ts": (t0 + ts * minute).isoformat(),
                                                                         "v": float(i)}) for i, ts in changes])

    send([(1, -90), (2, -50), (3, -20), (4, -5), (5, 10), (6, -180)])
    project.advance(now=t0)
    assert sorted(r.id for r in spark.table(src).collect()) == [2, 3, 4, 5]  # at or after 11:00
    assert rows(spark, "k_exp.last_hour") == Counter({(2, 2.0): 1, (3, 3.0): 1, (4, 4.0): 1, (5, 5.0): 1})
    assert not any(check_project(project).values())

    # id 1 comes back into the window, id 6 (gone) is deleted, id 2 leaves, id 7 arrives
    send([(1, -1), (6, None), (2, -120), (7, -10)])
    project.new_frontier()
    project.advance(now=t0 + 15 * minute)
    assert project.pipe.last_tick.path == "arranged", project.pipe.last_tick.why
    assert sorted(r.id for r in spark.table(src).collect()) == [1, 3, 4, 5, 7]  # at or after 11:15
    assert rows(spark, "k_exp.last_hour") == Counter({(1, 1.0): 1, (3, 3.0): 1, (4, 4.0): 1, (5, 5.0): 1, (7, 7.0): 1})
    assert rows(spark, "k_exp.recent") == Counter({(4, 17.0): 1})  # ids 1, 4, 5, 7 since 11:45
    assert not any(check_project(project).values())
    project.close()


def test_a_value_its_column_cannot_hold_is_a_dead_letter_and_the_rest_is_kept(spark, kafka, tmp_path):
    """A decimal beyond its precision or scale, or an integer out of range, between good
    records: dead-lettered with the column and the reason, never rounded; the good records
    around it are applied, and later runs go on."""
    create_topics(kafka, "t_fit", partitions=1)
    src = "raw_fit.payments"
    schema = StructType([StructField("id", IntegerType()), StructField("amount", DecimalType(12, 2))])
    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}))
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_fit")
    project.deploy(Model("k_fit.total", f"SELECT COUNT(*) AS n, SUM(amount) AS s FROM {src}"),
                   streams=[KafkaSource(src, "t_fit", schema)])
    produce(kafka, "t_fit", [(None, {"id": 1, "amount": "10.25"}), (None, {"id": 2, "amount": "99999999999999.99"}),
                             (None, {"id": 3, "amount": 10.125}), (None, {"id": 2 ** 31, "amount": "1"}),
                             (None, {"id": 4, "amount": "9999999999.99"})])
    project.advance()
    assert rows(spark, "k_fit.total") == Counter({(2, Decimal("10000000010.24")): 1})
    dead = {r.offset: r.reason for r in spark.table(f"{src}__dead_letters").collect()}
    assert set(dead) == {1, 2, 3}
    assert "'amount'" in dead[1] and "14 digits before the point, at most 10" in dead[1]
    assert "'amount'" in dead[2] and "3 digits after the point, at most 2" in dead[2]
    assert "'id'" in dead[3] and "out of range" in dead[3]
    produce(kafka, "t_fit", [(None, {"id": 5, "amount": "0.01"})])
    project.new_frontier()
    project.advance()
    assert rows(spark, "k_fit.total") == Counter({(3, Decimal("10000000010.25")): 1})
    assert not any(check_project(project).values())
    project.close()


def test_a_redone_tick_reports_the_true_lag(spark, kafka, tmp_path, monkeypatch):
    """A tick that failed after fixing its offset ranges is redone on the same ranges by
    the next instance, which reports the offsets still left after them, not "caught up"."""
    create_topics(kafka, "t_lag", partitions=1)
    src = "raw_lag.orders"
    produce(kafka, "t_lag", [(None, {"id": i, "name": "a", "amount": 1.0}) for i in range(30)])
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_lag")
    settings = KafkaSettings({"bootstrap.servers": kafka})

    def opened() -> Project:
        project = Project(spark, str(tmp_path / "state"), kafka=settings, max_records=10)
        project.deploy(Model("k_lag.totals", VIEW.format(src=src)), streams=[KafkaSource(src, "t_lag", SCHEMA)])
        return project

    project = opened()
    told = []  # what a tick's listener sees: its manifest committed, its views not yet published
    project.on_commit = lambda r: told.append((r.tick, project.pipe.tick, spark.catalog.tableExists("k_lag.totals")))
    assert project.advance() and project.last.lag == {src: 20}
    assert told == [(1, 1, False)]
    with monkeypatch.context() as m:
        m.setattr(project.outputs, "write", lambda *a: (_ for _ in ()).throw(RuntimeError("the process died here")))
        with pytest.raises(RuntimeError):
            project.advance()  # reads offsets 10-19, then fails before committing
    project.close()
    manifest = tmp_path / "state" / "_manifest"
    (manifest / "intent-000000000001.json").write_text("{}")  # a crash between tick 1's commit and its removal
    project = opened()
    assert [p.name for p in manifest.glob("intent-*")] == ["intent-000000000002.json"]
    read = []
    project.on_read = lambda r: read.append((r.tick, r.redone, dict(r.lag), project.pipe.tick))
    assert project.advance()  # the same offsets again
    assert project.last.offsets == {src: 10} and project.last.lag == {src: 10} and project.last.redone
    assert project.advance() and project.last.lag == {src: 0} and not project.last.redone
    assert read == [(2, True, {src: 10}, 1), (3, False, {src: 0}, 2)]  # told before the tick commits
    assert rows(spark, "k_lag.totals") == Counter({("a", 30, 30.0): 1})
    assert not list(manifest.glob("intent-*"))
    project.close()


def test_a_model_failing_on_its_input_does_not_stop_the_others(spark, kafka, tmp_path):
    """A division by zero in one model and a cast overflow in another, and a decimal that
    does not fit on the source, between good records: the other models advance and are
    right, the bad record is dead-lettered, the failing models (and the one reading them)
    keep their last contents and their error names the cause; once the bad rows are
    updated or deleted, the next run makes every model equal to batch."""
    create_topics(kafka, "t_fail", partitions=1)
    src = "raw_fail.items"
    schema = StructType([StructField("id", LongType()), StructField("qty", IntegerType()),
                         StructField("price", DecimalType(10, 2))])
    source = KafkaSource(src, "t_fail", schema, envelope="upsert", key=("id",))
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_fail")
    models = [Model("k_fail.unit_price", f"SELECT id, price / qty AS unit FROM {src}"),
              Model("k_fail.priciest", "SELECT MAX(unit) AS m FROM k_fail.unit_price"),
              Model("k_fail.small", f"SELECT id, CAST(qty AS TINYINT) AS q FROM {src}"),
              Model("k_fail.totals", f"SELECT COUNT(*) AS n, SUM(price) AS s FROM {src}")]
    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}))

    def send(docs):
        produce(kafka, "t_fail", [({"id": d["id"]}, None if len(d) == 1 else d) for d in docs])

    send([{"id": 1, "qty": 2, "price": "10.00"}])
    for m in models:
        project.run_model(m, [source])
    assert not any(check_project(project).values())
    send([{"id": 2, "qty": 0, "price": "5.00"}, {"id": 3, "qty": 300, "price": "1.00"},
          {"id": 4, "qty": 1, "price": "123456789012.00"}, {"id": 5, "qty": 4, "price": "2.00"}])
    project.new_frontier()
    with pytest.raises(ModelFailed, match="DIVIDE_BY_ZERO"):
        project.run_model(models[0], [source])
    assert project.failed.keys() == {"k_fail.unit_price", "k_fail.priciest", "k_fail.small"}
    assert project.failed["k_fail.small"].startswith("CAST_OVERFLOW")
    assert project.failed["k_fail.priciest"] == "reads k_fail.unit_price, which failed"
    assert project.last.failed == project.failed
    assert rows(spark, "k_fail.totals") == Counter({(4, Decimal("18.00")): 1})  # ids 1, 2, 3, 5
    assert rows(spark, "k_fail.unit_price") == Counter({(1, Decimal("5.00")): 1})  # as it was
    dead = [r.reason for r in spark.table(f"{src}__dead_letters").collect()]
    assert len(dead) == 1 and "'price'" in dead[0] and "digits before the point" in dead[0]
    assert project.run_model(models[3], [source])["action"] == "unchanged"  # the others report no error

    send([{"id": 2, "qty": 1, "price": "5.00"}, {"id": 3}])  # the bad rows: one updated, one deleted
    project.new_frontier()
    project.run_model(models[0], [source])
    assert project.failed == {}
    assert not any(check_project(project).values())
    project.close()


def test_max_records_counts_records_not_offsets(spark, kafka, tmp_path, monkeypatch):
    """A topic written one record per transaction holds a commit marker after each record:
    twice the offsets. A tick reads at most max_records records (in the driver, and by
    executors), its ranges end after the last record it read, and the lag counts offsets."""
    import json

    from confluent_kafka import Producer

    from dbt_incremental_stream.project import inputs

    create_topics(kafka, "t_txn", partitions=2)
    producer = Producer({"bootstrap.servers": kafka, **CLIENT_LOGS, "transactional.id": "t_txn-test"})
    producer.init_transactions(10)
    for i in range(50):
        producer.begin_transaction()
        producer.produce("t_txn", key=str(i % 2).encode(), value=json.dumps({"id": i, "name": "a", "amount": 1.0}))
        producer.commit_transaction(10)
    src = "raw_txn.orders"
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_txn")
    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}),
                      max_records=10)
    project.deploy(Model("k_txn.totals", VIEW.format(src=src)), streams=[KafkaSource(src, "t_txn", SCHEMA)])
    read = []
    for executors in (False, False, True, True, False):
        monkeypatch.setattr(inputs, "DRIVER_READ", 0 if executors else 100_000)
        project.new_frontier()
        assert project.advance()
        read.append((project.last.rows_in[src], project.last.offsets[src], project.last.lag[src]))
    # 10 records a tick over about 20 offsets (a range ends after its last record, or at the
    # partition's end when only markers are left): 100 offsets in all
    assert [n for n, _, _ in read] == [10] * 5 and read[-1][2] == 0, read
    assert sum(o for _, o, _ in read) == 100 and all(o + lag <= 100 for _, o, lag in read), read
    project.new_frontier()
    assert not project.advance()  # caught up
    assert rows(spark, "k_txn.totals") == Counter({("a", 50, 50.0): 1})
    assert not any(check_project(project).values())
    project.close()


def test_a_failed_redeploy_leaves_the_project_as_it_was(spark, kafka, tmp_path):
    """A --full-refresh redeploy with new Kafka columns and a model that does not compile
    fails, and the project keeps its offsets: nothing is read twice."""
    from dbt_incremental_stream.errors import CompileError

    src, topic = "raw_redeploy.orders", "t_redeploy"
    create_topics(kafka, topic, partitions=1)
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_redeploy")
    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}))
    stream = KafkaSource(src, topic, SCHEMA)
    model = Model("k_redeploy.totals", VIEW.format(src=src))
    project.deploy(model, streams=[stream])
    produce(kafka, topic, [(None, {"id": 1, "name": "a", "amount": 1.0}),
                           (None, {"id": 2, "name": "a", "amount": 2.0})])
    assert project.advance()
    offsets = {rel: dict(parts) for rel, parts in project.inputs.offsets.items()}
    wider = KafkaSource(src, topic, StructType([*SCHEMA.fields, StructField("note", StringType())]))
    with pytest.raises(CompileError):
        project.deploy(Model("k_redeploy.totals", f"SELECT nope FROM {src}"), streams=[wider], full_refresh=True)
    assert project.inputs.offsets == offsets and project.streams[src] == stream and not project.behind
    assert project.models["k_redeploy.totals"] == model
    produce(kafka, topic, [(None, {"id": 3, "name": "b", "amount": 4.0})])
    project.new_frontier()
    assert project.advance()
    assert rows(spark, "k_redeploy.totals") == Counter({("a", 2, 3.0): 1, ("b", 1, 4.0): 1})
    project.close()


def test_a_source_read_to_its_end_is_fetched_in_one_pass_a_tick(spark, kafka, tmp_path, monkeypatch):
    """Serving: a tick reads the few new records of sources read to their end at the
    previous tick in one pass of the kept consumer (no offset ranges asked, no consumer per
    partition); a backlog over max_records goes back to ranged reads until it is read."""
    from dbt_incremental_stream.connectors import datasource
    from dbt_incremental_stream.connectors.kafka import KafkaTopics

    calls: Counter[str] = Counter()
    for owner, name in ((KafkaTopics, "ranges"), (KafkaTopics, "fetch"), (datasource, "read_chunks")):
        original = getattr(owner, name)
        monkeypatch.setattr(owner, name, lambda *a, _f=original, _n=name, **k: (calls.update([_n]), _f(*a, **k))[1])
    create_topics(kafka, "t_fetch", "t_fetch_b", partitions=2)
    sources = [KafkaSource("raw_fetch.a", "t_fetch", SCHEMA), KafkaSource("raw_fetch.b", "t_fetch_b", SCHEMA)]
    spark.sql("CREATE SCHEMA IF NOT EXISTS k_fetch")
    project = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({"bootstrap.servers": kafka}),
                      max_records=10)
    project.deploy(Model("k_fetch.totals", "SELECT name, COUNT(*) AS n FROM (SELECT name FROM raw_fetch.a "
                                           "UNION ALL SELECT name FROM raw_fetch.b) GROUP BY name"), streams=sources)
    sent = Counter()

    def tick(a: int, b: int) -> tuple[Counter[str], int]:
        for topic, n in (("t_fetch", a), ("t_fetch_b", b)):
            produce(kafka, topic, [(str(i), {"id": i, "name": topic, "amount": 1.0}) for i in range(n)])
            sent[topic] += n
        calls.clear()
        project.new_frontier()
        project.advance()
        return Counter(calls), sum(project.last.lag.values())

    assert tick(3, 2)[0]["ranges"] == 2  # the first read of each: offset ranges
    assert tick(4, 1) == (Counter(fetch=1), 0)  # both in one pass
    assert tick(0, 2) == (Counter(fetch=1), 0)
    assert rows(spark, "k_fetch.totals") == Counter({(t, n): 1 for t, n in sent.items()})
    # a is over max_records: offset ranges and a consumer per partition, b still fetched;
    # then a's backlog is read by ranges (left out of the fetch), until it is read
    ranged = Counter(fetch=1, ranges=1, read_chunks=2)
    assert [tick(25, 1), tick(0, 0), tick(0, 0)] == [(ranged, 15), (ranged, 5), (ranged, 0)]
    assert tick(1, 1) == (Counter(fetch=1), 0)
    assert rows(spark, "k_fetch.totals") == Counter({(t, n): 1 for t, n in sent.items()})
    assert not any(check_project(project).values())
    project.close()
