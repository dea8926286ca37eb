"""What a Kafka client kept for the life of ``dbt-stream serve`` remembers of its errors:
the latest few distinct ones, for the message of a failed read, however long an outage.
And which of a consumer's settings a profile may change."""
from __future__ import annotations

from dbt_incremental_stream.connectors.kafka import ClientErrors, KafkaSettings


def test_a_long_outage_keeps_the_latest_distinct_errors_only():
    errors = ClientErrors()
    assert not errors and str(errors) == ""
    for i in range(10_000):  # a broker down for a day, reported every few seconds
        errors(f"localhost:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed (attempt {i % 50})")
        errors("1/1 brokers are down")
    assert len(errors) == ClientErrors.KEPT
    kept = str(errors).split("; ")
    assert kept[-1] == "1/1 brokers are down" and "(attempt 49)" in kept[-2]
    assert kept.count("1/1 brokers are down") == 1


def test_the_unreachable_message_names_the_errors_seen():
    settings = KafkaSettings.from_profile({"bootstrap_servers": "broker.invalid:9092"})
    errors = ClientErrors()
    errors("Failed to resolve 'broker.invalid:9092'")
    message = str(settings.unreachable(5.0, errors, RuntimeError("timed out")))
    assert "Failed to resolve 'broker.invalid:9092'" in message and "bootstrap_servers" in message
    assert "timed out" in str(settings.unreachable(5.0, ClientErrors(), RuntimeError("timed out")))


def test_a_profile_tunes_the_consumer_but_cannot_change_how_it_reads():
    settings = KafkaSettings.from_profile({"bootstrap_servers": "broker:9092", "fetch.wait.max.ms": 200,
                                           "isolation.level": "read_uncommitted", "enable.auto.commit": True})
    config = settings.consumer_config({})
    assert config["fetch.wait.max.ms"] == "200" and config["bootstrap.servers"] == "broker:9092"
    assert config["isolation.level"] == "read_committed" and config["enable.auto.commit"] is False
    default = KafkaSettings.from_profile({"bootstrap_servers": "broker:9092"}).consumer_config({})
    assert default["fetch.wait.max.ms"] == 10
