"""Kafka connection settings: the profile's ``kafka:`` block as librdkafka configuration."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import ConnectorError, StreamError

#: librdkafka settings whose values are secrets: never printed
SECRET_PARTS = ("password", "secret", "token", "key.pem", "keystore", "sasl.oauthbearer.config")


@dataclass(frozen=True)
class KafkaSettings:
    """``bootstrap.servers`` plus any librdkafka setting (SASL, SSL, timeouts) as given."""

    config: Mapping[str, str]

    @staticmethod
    def from_profile(block: Mapping[str, Any]) -> KafkaSettings:
        """Keys as in librdkafka; ``bootstrap_servers`` may be written with underscores."""
        config = {str(k).replace("bootstrap_servers", "bootstrap.servers"): str(v) for k, v in block.items()}
        if not config.get("bootstrap.servers"):
            raise StreamError("`bootstrap_servers` is required (host:port[,host:port...])")
        return KafkaSettings(config)

    @property
    def bootstrap_servers(self) -> str:
        return self.config["bootstrap.servers"]

    def redacted(self) -> dict[str, str]:
        """The settings fit to print."""
        return {k: "****" if any(p in k.lower() for p in SECRET_PARTS) else v for k, v in self.config.items()}

    def check(self, timeout: float = 10.0) -> int:
        """Connect and list topics; the number of topics, or a ConnectorError saying what to fix."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        errors: list[str] = []
        admin = AdminClient({**self.config, "error_cb": lambda e: errors.append(str(e))})
        try:
            return len(admin.list_topics(timeout=timeout).topics)
        except KafkaException as e:
            detail = "; ".join(dict.fromkeys(errors)) or str(e)
            raise ConnectorError(
                f"Kafka at {self.bootstrap_servers} is not reachable within {timeout:.0f}s ({detail}); "
                "check `kafka.bootstrap_servers` and the security settings in the profile") from e
