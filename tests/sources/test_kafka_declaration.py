"""A Kafka source's declaration: what it refuses, and the client settings each client gets."""

from __future__ import annotations

import pytest

import absreplay.api as abs
from coordinator.errors import ConfigError
from coordinator.sources.kafka_source import topic_partition


def test_a_source_names_topics_or_a_pattern_and_its_servers() -> None:
    with pytest.raises(ValueError, match="topics=.* or a pattern=, one of the two"):
        abs.kafka(bootstrap_servers="k:9092")
    with pytest.raises(ValueError, match="topics=.* or a pattern=, one of the two"):
        abs.kafka("a", pattern="a.*", bootstrap_servers="k:9092")
    with pytest.raises(ValueError, match="'a b' is not a topic name"):
        abs.kafka("a b", bootstrap_servers="k:9092")
    with pytest.raises(ValueError, match="pattern '\\(' is not a regular expression"):
        abs.kafka(pattern="(", bootstrap_servers="k:9092")
    with pytest.raises(ValueError, match="needs bootstrap_servers"):
        abs.kafka("a", bootstrap_servers="")
    with pytest.raises(ValueError, match="options group.id are the source's own"):
        abs.kafka("a", bootstrap_servers="k:9092", options={"group.id": "g"})
    with pytest.raises(ValueError, match="records are text lines, JSON objects or CSV lines"):
        abs.kafka("a", bootstrap_servers="k:9092", records=abs.parquet({"x": int}))
    with pytest.raises(ValueError, match="unknown keyword topic \\(did you mean topics\\?\\)"):
        abs.kafka(topic="a", bootstrap_servers="k:9092")


def test_settings_are_read_when_used_and_never_shown(monkeypatch) -> None:
    fmt = abs.kafka(["a", "b"], bootstrap_servers="${BROKERS}", records=abs.json_lines({"x": int}),
                    options={"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                             "sasl.username": "abs", "sasl.password": "${KAFKA_PASSWORD}",
                             "ssl.ca.location": "/etc/ca.pem"})
    assert "KAFKA_PASSWORD" not in repr(fmt) and "sasl" not in repr(fmt)
    with pytest.raises(ConfigError, match="Kafka bootstrap_servers '\\$\\{BROKERS\\}' names \\$\\{BROKERS\\}"):
        fmt.client_config()
    monkeypatch.setenv("BROKERS", "k1:9093,k2:9093")
    monkeypatch.setenv("KAFKA_PASSWORD", "s3cret")
    assert fmt.client_config()["sasl.password"] == "s3cret"
    spark = fmt.spark_options()
    assert spark["kafka.bootstrap.servers"] == "k1:9093,k2:9093"
    assert spark["kafka.sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                               'username="abs" password="s3cret";')
    assert spark["kafka.ssl.truststore.location"] == "/etc/ca.pem" and spark["kafka.ssl.truststore.type"] == "PEM"
    assert "kafka.sasl.password" not in spark
    assert fmt.time_field is None and fmt.fields == (("x", "long"),) and fmt.checks_each_line


def test_partition_names_map_back_to_topic_partitions() -> None:
    assert topic_partition("clicks-a-2") == ("clicks-a", 2)
    assert topic_partition("views/clicks.v1-10") == ("clicks.v1", 10)
