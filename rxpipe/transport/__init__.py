"""Beyond one machine: the broker transport between gateways and workers (DESIGN §8).

The whole contract crosses the wire, once for every broker:

- **admission demand**: the gateway's sink (:class:`TransportSink`) admits a request only while
  the requests queued and not yet acknowledged stay under ``max_backlog`` (else 429);
- **request(n)**: the worker's source (:class:`WorkerSource`) turns downstream demand into one
  bounded read of at most ``n`` requests, each with an :class:`AckHandle` (acknowledged only
  after its reply is written; redelivered after ``visibility_timeout_s`` if its worker died);
- **replies** come back on a channel per gateway, de-duplicated there by request id and chunk
  sequence number (a gap fails the stream);
- **cancel**: a client that leaves is cancelled wherever its request is (not read yet: skipped;
  queued or decoding on a worker: aborted within one engine step);
- **token credit**: a slow reader's cumulative credit reaches the worker, whose engine stops
  stepping that sequence; ``stall_timeout_s`` ends it end to end;
- **clocks**: liveness, pauses and deadlines use the broker's clock, never a host's.

A broker adapter only moves bytes (:class:`GatewayBroker`, :class:`WorkerBroker`) and is found
by URL scheme: it registers itself (:func:`register_broker`) when its package is imported, and
the shipped ones are imported by name on first use, so this package imports none of them. Three
ship: Redis Streams (:mod:`rxpipe.redis`, ``redis://``), NATS JetStream (:mod:`rxpipe.nats`,
``nats://``) and Kafka (:mod:`rxpipe.kafka`, ``kafka://``). Pick one by URL:

    Pipeline(Gateway(model="sim"), transport_sink("nats://127.0.0.1:4222", max_backlog=1000))
    Pipeline(transport_source("nats://127.0.0.1:4222", max_unacked=64), ops.execute(engine))
"""

from __future__ import annotations

from typing import Any, Callable

from ..flowable import Operator
from ._ack import AckHandle, RemoteRequest
from ._backoff import Backoff
from ._clock import BrokerClock
from ._interface import Delivery, GatewayBroker, Snapshot, WorkerBeat, WorkerBroker
from ._registry import BUILTIN_ADAPTERS, BrokerAdapter, adapter_for, known_schemes, register_broker
from ._replies import ReplyRouter
from ._settings import (
    BROKER_URL,
    SCHEMES,
    TRANSPORT_SETTINGS,
    TransportSettings,
    broker_url,
    default_consumer,
    public_url,
)
from .sink import TransportSink
from .source import WorkerSource

__all__ = ["TransportSettings", "TRANSPORT_SETTINGS", "BROKER_URL", "TransportSink", "WorkerSource", "GatewayBroker",
           "WorkerBroker", "Delivery", "Snapshot", "WorkerBeat", "AckHandle", "RemoteRequest", "ReplyRouter",
           "BrokerClock", "Backoff", "settings_for", "transport_sink", "transport_source", "default_consumer",
           "public_url", "SCHEMES", "broker_url", "broker_name", "BrokerAdapter", "register_broker", "adapter_for",
           "known_schemes", "BUILTIN_ADAPTERS"]


def settings_for(url: str, **settings: Any) -> TransportSettings:
    """The settings class of the broker ``url`` names (``redis://`` → ``RedisSettings``,
    ``nats://`` → ``NatsSettings``, ``kafka://`` → ``KafkaSettings``, or a registered adapter's),
    built with ``settings``. Raises ValueError for a scheme no adapter serves (naming the supported
    ones) or a bad setting."""
    return adapter_for(url).settings(url=url, **settings)


def broker_name(url: str) -> str:
    """The name of the adapter serving ``url`` (``"redis"``, ``"nats"`` ...; ValueError if none)."""
    return adapter_for(url).name


def transport_sink(url: str, *, name: str | None = None, **settings: Any) -> Operator:
    """The gateway side for the broker at ``url`` as an operator: ``Pipeline(Gateway(...),
    transport_sink(url, max_backlog=...))`` (:class:`TransportSink`; settings: see
    :class:`TransportSettings` and the broker's own)."""
    adapter = adapter_for(url)
    s = adapter.settings(url=url, **settings)
    return lambda source: adapter.sink(source, s, name)


def transport_source(url: str, *, max_unacked: int | None = None, pause_s: Callable[[], float] | None = None,
                     name: str | None = None, **settings: Any) -> WorkerSource:
    """The worker side for the broker at ``url`` (:class:`WorkerSource`)."""
    adapter = adapter_for(url)
    return adapter.source(adapter.settings(url=url, **settings), max_unacked, pause_s, name)
