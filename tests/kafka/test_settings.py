"""KafkaSettings: the URL, legal topic names, the group's timing, and the pipelines' kafka:// keys."""

from __future__ import annotations

import pytest

from rxpipe.kafka import KafkaSettings
from rxpipe.kafka._settings import topics
from rxpipe.settings import SettingError
from rxpipe.transport import settings_for


def test_defaults_and_topic_names() -> None:
    s = settings_for("kafka://127.0.0.1:9092,127.0.0.2:9093")
    assert isinstance(s, KafkaSettings)
    assert s.bootstrap_servers == ["127.0.0.1:9092", "127.0.0.2:9093"]
    assert (s.stream, s.group, s.partitions, s.session_timeout_ms, s.heartbeat_interval_ms,
            s.max_poll_interval_ms, s.fetch_max_wait_ms) == ("rxpipe.requests", "workers", 8, 6000, 1000, 10000, 20)
    t = topics(settings_for("kafka://h:1", stream="rxpipe:requests"))  # the pipelines' shared default
    assert (t.requests, t.control, t.live, t.heads) == (
        "rxpipe.requests", "rxpipe.requests.control", "rxpipe.requests.live", "rxpipe.requests.heads")
    assert t.replies("host-12-a/b c") == "rxpipe.requests.replies.host-12-a.b.c"


@pytest.mark.parametrize("url", ["kafka://", "kafka://host", "kafka://host:x", "kafka://:9092", "nats://h:1"])
def test_a_bad_url_is_refused(url: str) -> None:
    with pytest.raises(SettingError, match="url"):
        KafkaSettings(url=url)


def test_the_group_timing_and_the_topic_length_are_checked() -> None:
    with pytest.raises(SettingError, match="heartbeat_interval_ms .3000. must be below session_timeout_ms .3000."):
        KafkaSettings(session_timeout_ms=3000, heartbeat_interval_ms=3000)
    with pytest.raises(SettingError, match="partitions must be an integer >= 1"):
        KafkaSettings(partitions=0)
    with pytest.raises(SettingError, match="stream must be at most 176 characters"):
        KafkaSettings(stream="s" * 177)
    assert len(topics(KafkaSettings(stream="s" * 176)).replies("g" * 200)) == 249


def test_the_pipelines_take_kafka_settings_only_with_a_kafka_url() -> None:
    from rxpipe.loader import load_pipeline

    url = "kafka://127.0.0.1:1"
    worker = load_pipeline("pipelines/llm_worker.py", {"broker_url": url, "max_num_seqs": 4, "consumer": "w7",
                                                       "session_timeout_ms": 3000, "heartbeat_interval_ms": 300,
                                                       "max_poll_interval_ms": 2000, "partitions": 2})
    source = worker.stages[0]
    assert (source.kind, source.name) == ("kafka_source", "kafka_source")
    s = source.settings  # type: ignore[attr-defined]
    assert (s.url, s.consumer, s.session_timeout_ms, s.heartbeat_interval_ms, s.max_poll_interval_ms,
            s.partitions, s.stream) == (url, "w7", 3000, 300, 2000, 2, "rxpipe:requests")
    assert source.max_unacked == 4  # type: ignore[attr-defined]
    gateway = load_pipeline("pipelines/llm_gateway.py", {"broker_url": url, "partitions": 3,
                                                         "fetch_max_wait_ms": 5})
    assert [stage.kind for stage in gateway.stages] == ["gateway", "kafka_sink"]
    assert (gateway.stages[1].settings.partitions, gateway.stages[1].settings.fetch_max_wait_ms) == (3, 5)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown setting"):
        load_pipeline("pipelines/llm_gateway.py", {"broker_url": url, "session_timeout_ms": 3000})
    nats = load_pipeline("pipelines/llm_worker.py", {"broker_url": "nats://127.0.0.1:1", "partitions": 2})
    assert nats.stages[0].kind == "nats_source"  # a kafka:// key is ignored on another broker
