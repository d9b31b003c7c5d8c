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

Needs the ``kafka`` extra (``pip install -e '.[kafka]'``: aiokafka). docs/kafka.md says how to run
it, its settings, guarantees and limits.
"""

from __future__ import annotations

from typing import Callable

from ..engines import CompletionRequest
from ..flowable import Flowable, Operator
from ..transport import TransportSink, WorkerSource
from ._adapter import KafkaGatewayBroker
from ._settings import KAFKA_SETTINGS, KafkaSettings, topics
from ._worker import KafkaWorkerBroker

__all__ = ["KafkaSettings", "KAFKA_SETTINGS", "KafkaSink", "kafka_sink", "KafkaSource"]


class KafkaSink(TransportSink):
    """The gateway side of the Kafka transport (a :class:`~rxpipe.transport.TransportSink`)."""

    kind = "kafka_sink"

    def __init__(self, source: Flowable[CompletionRequest], settings: KafkaSettings, *,
                 name: str | None = None) -> None:
        if not isinstance(settings, KafkaSettings):
            raise TypeError(f"KafkaSink needs KafkaSettings, got {settings!r}")
        super().__init__(source, settings, KafkaGatewayBroker(settings), name=name)

    def _reply_channel(self) -> str:
        return topics(self.settings).replies(self.gateway_id)  # type: ignore[arg-type]


def kafka_sink(settings: KafkaSettings, *, name: str | None = None) -> Operator:
    """The gateway side of the Kafka transport as an operator: ``Pipeline(Gateway(...),
    kafka_sink(settings))``. See :class:`KafkaSink`."""
    if not isinstance(settings, KafkaSettings):
        raise TypeError(f"kafka_sink() needs KafkaSettings, got {settings!r}")
    return lambda source: KafkaSink(source, settings, name=name)


class KafkaSource(WorkerSource):
    """Worker ``settings.consumer`` in the consumer group ``settings.group`` (a
    :class:`~rxpipe.transport.WorkerSource` over Kafka)."""

    kind = "kafka_source"

    def __init__(self, settings: KafkaSettings, *, max_unacked: int | None = None,
                 pause_s: Callable[[], float] | None = None, name: str | None = None) -> None:
        if not isinstance(settings, KafkaSettings):
            raise TypeError(f"KafkaSource needs KafkaSettings, got {settings!r}")
        super().__init__(settings, KafkaWorkerBroker(settings), max_unacked=max_unacked, pause_s=pause_s, name=name)
