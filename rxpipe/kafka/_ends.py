"""The gateway and worker ends of the Kafka transport (the classes :mod:`rxpipe.kafka` exports)."""

from __future__ import annotations

from typing import Callable

from ..flowable import Flowable, Operator
from ..serving import CompletionRequest
from ..transport import BrokerAdapter, TransportSink, WorkerSource, register_broker
from ..transport._settings import SCHEMES
from ._adapter import KafkaGatewayBroker
from ._settings import KafkaSettings, topics
from ._worker import KafkaWorkerBroker

__all__ = ["KafkaSink", "kafka_sink", "KafkaSource"]


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


register_broker(BrokerAdapter(
    "kafka", SCHEMES["kafka"], KafkaSettings,
    sink=lambda source, settings, name: KafkaSink(source, settings, name=name),
    source=lambda settings, max_unacked, pause_s, name: KafkaSource(settings, max_unacked=max_unacked,
                                                                    pause_s=pause_s, name=name)))
