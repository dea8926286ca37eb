"""A broker that is not there, one that refuses the credentials: a clear error naming the
source and the setting to fix, no secret in it, and the committed state untouched (the
same project resumes once the profile is fixed). Secrets handed to executors stay out of
query plans."""
from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from dbt_incremental_stream.connectors.datasource import kafka_frame
from dbt_incremental_stream.connectors.kafka import KafkaSettings, KafkaSource, KafkaTopics
from dbt_incremental_stream.errors import ConnectorError
from dbt_incremental_stream.project import Model, Project
from devkit.kafka import create_topics, produce

SCHEMA = StructType([StructField("id", LongType()), StructField("name", StringType())])
SECRET = "hunter2-not-for-logs"


@pytest.mark.parametrize("bad, says", [
    ({"bootstrap.servers": "127.0.0.1:1"}, r"127.0.0.1:1 is not reachable .*Connection refused.*`bootstrap_servers`"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u",
      "sasl.password": SECRET}, r"refused the connection's security .*SASL.*security.protocol, sasl"),
])
def test_broker_errors_name_the_setting_and_keep_the_state(spark, kafka, tmp_path, bad, says):
    topic = f"err_{len(bad)}"
    create_topics(kafka, topic)
    good = KafkaSettings({"bootstrap.servers": kafka})
    source = KafkaSource("err_raw.t", topic, SCHEMA)
    spark.sql("CREATE SCHEMA IF NOT EXISTS err")
    project = Project(spark, str(tmp_path / "state"), kafka=good)
    project.deploy(Model("err.v", "SELECT * FROM err_raw.t"), streams=[source])
    produce(kafka, topic, [(None, {"id": 1, "name": "a"})])
    project.advance()
    project.close()

    produce(kafka, topic, [(None, {"id": 2, "name": "b"})])
    broken = Project(spark, str(tmp_path / "state"), kafka=KafkaSettings({**good.config, **bad}))
    broken.inputs.topics().timeout = 3
    with pytest.raises(ConnectorError, match=r"Kafka source 'err_raw.t': Kafka at .*" + says) as e:
        broken.advance()
    assert SECRET not in str(e.value)
    assert broken.tick == 1
    broken.close()

    fixed = Project(spark, str(tmp_path / "state"), kafka=good)
    assert fixed.tick == 1
    fixed.advance()
    assert Counter(tuple(r) for r in spark.table("err.v").collect()) == Counter({(1, "a"): 1, (2, "b"): 1})
    fixed.close()


def test_secrets_stay_out_of_query_plans(spark, kafka):
    create_topics(kafka, "err_plan")
    produce(kafka, "err_plan", [(None, {"id": 1, "name": "a"})])
    settings = KafkaSettings({"bootstrap.servers": kafka, "sasl.password": SECRET, "ssl.key.password": SECRET})
    source = KafkaSource("err_raw.p", "err_plan", SCHEMA)
    topics = KafkaTopics(KafkaSettings({"bootstrap.servers": kafka}))
    ranges, _ = topics.ranges(source, {})
    topics.close()
    frame = kafka_frame(spark, settings, source, ranges)  # librdkafka ignores the unused secrets
    assert frame.count() == 1
    assert SECRET not in frame._jdf.queryExecution().toString()
    assert SECRET not in str(settings.redacted())
