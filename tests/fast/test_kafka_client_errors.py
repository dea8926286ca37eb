"""What a Kafka client kept for the life of ``dbt-stream serve`` remembers of its errors:
the latest few distinct ones, for the message of a failed read, however long an outage."""
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
