"""Profile keys: `dbt debug` checks Spark and Kafka, says what to fix when Kafka is not
reachable or a key is wrong, and never prints or stores a Kafka secret."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dbt.tests.util import run_dbt_and_capture

SECRET = "s3cret-Kafka-pa55word"


def files_mention(root: Path, text: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and text in p.read_text(errors="ignore")]


class TestDebugWithKafka:
    @pytest.fixture(scope="class")
    def dbt_profile_target(self, kafka):
        return {"type": "incremental_stream", "threads": 1, "master": "local[2]",
                "kafka": {"bootstrap_servers": kafka, "sasl.username": "analytics", "sasl.password": SECRET}}

    def test_debug_passes_and_hides_secrets(self, project, kafka):
        _, log = run_dbt_and_capture(["debug"])
        assert "All checks passed" in log and "master: local[2]" in log
        assert f"kafka_bootstrap_servers: {kafka}" in log
        assert SECRET not in log
        assert not files_mention(Path(project.project_root), SECRET)  # target/, logs/


class TestDebugKafkaUnreachable:
    @pytest.fixture(scope="class")
    def dbt_profile_target(self):
        return {"type": "incremental_stream", "threads": 1, "master": "local[2]",
                "kafka": {"bootstrap_servers": "127.0.0.1:9", "socket.connection.setup.timeout.ms": "2000"}}

    def test_debug_names_the_setting(self, project):
        _, log = run_dbt_and_capture(["debug"], expect_pass=False)
        assert "Kafka at 127.0.0.1:9 is not reachable" in log and "`bootstrap_servers`" in log \
            and "`kafka:` block" in log

    def test_the_dbt_command_says_it_once(self, project):
        """The `dbt` command's whole output (librdkafka writes its log to stderr itself,
        around dbt's): the message, not a line per connection attempt."""
        run = subprocess.run([str(Path(sys.executable).parent / "dbt"), "debug", "--profiles-dir",
                              str(project.profiles_dir)], cwd=project.project_root, capture_output=True, text=True,
                             timeout=600)
        out = run.stdout + run.stderr
        assert run.returncode != 0 and "Kafka at 127.0.0.1:9 is not reachable" in out, out
        assert "kafka_bootstrap_servers: 127.0.0.1:9" in out, out
        assert "rdkafka" not in out and "%3|" not in out, out


def test_profile_errors_say_what_to_fix():
    from dbt_common.exceptions import DbtRuntimeError

    from dbt.adapters.incremental_stream.connections import IncrementalStreamCredentials

    with pytest.raises(DbtRuntimeError, match="is not a Spark master URL"):
        IncrementalStreamCredentials(schema="s", master="localhost")
    with pytest.raises(DbtRuntimeError, match="`bootstrap_servers` is required"):
        IncrementalStreamCredentials(schema="s", kafka={"security.protocol": "SSL"})
    with pytest.raises(DbtRuntimeError, match="method` must be `session"):
        IncrementalStreamCredentials(schema="s", method="thrift")
    creds = IncrementalStreamCredentials(schema="s", kafka={"bootstrap_servers": "b:9092", "sasl.password": "x"})
    assert creds.kafka_settings.redacted()["sasl.password"] == "****"
    assert "kafka" not in creds._connection_keys()
    assert os.sep not in creds.state_location  # relative: resolved against the project


def test_spark_conf_wins_over_dbt_sparks_settings():
    """dbt-spark applies its settings at every statement, ANSI mode off among them; a
    profile's `spark_conf` is what the session gets."""
    from dbt.adapters.incremental_stream.connections import IncrementalStreamCredentials

    assert IncrementalStreamCredentials(schema="s").server_side_parameters["spark.sql.ansi.enabled"] == "false"
    creds = IncrementalStreamCredentials(schema="s", spark_conf={"spark.sql.ansi.enabled": True})
    assert creds.server_side_parameters["spark.sql.ansi.enabled"] == "true"
