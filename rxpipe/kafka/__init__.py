"""Beyond one machine: the Kafka adapter of :mod:`rxpipe.transport` (DESIGN §8 "Kafka").

Gateway side, :func:`kafka_sink` / :class:`KafkaSink`: admitted requests are produced to the
request topic (round-robin over its partitions); demand is the room under ``max_backlog``, the
backlog being *produced − committed*. Worker side, :class:`KafkaSource`: a member of the
consumer group ``group`` where ``request(n)`` becomes ``getmany(max_records=n)``; its partitions
are paused while it wants nothing and polled all the same (a long generation never exceeds
``max_poll_interval_ms``); a request's offset is committed after its reply is stored, in
partition order. Replies, cancels and credit travel on Kafka topics too (see ``_adapter``).

    from rxpipe.kafka import KafkaSettings, kafka_sink, KafkaSource
    settings = KafkaSettings(url="kafka://127.0.0.1:9092", max_backlog=1000)
    gateway = Pipeline(Gateway(model="sim"), kafka_sink(settings))
    worker = Pipeline(KafkaSource(settings, max_unacked=64), ops.execute(engine))

Needs the ``kafka`` extra (``pip install -e '.[kafka]'``: aiokafka) for the sink and the source;
the settings import without it (the pipelines list them whatever their broker). docs/kafka.md says
how to run it, its settings, guarantees and limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._settings import KAFKA_SETTINGS, KafkaSettings

if TYPE_CHECKING:
    from ._ends import KafkaSink, KafkaSource, kafka_sink

__all__ = ["KafkaSettings", "KAFKA_SETTINGS", "KafkaSink", "kafka_sink", "KafkaSource"]


def __getattr__(name: str) -> Any:
    # aiokafka is imported when an end is first used, not with the settings
    if name in ("KafkaSink", "kafka_sink", "KafkaSource"):
        from . import _ends

        return getattr(_ends, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
