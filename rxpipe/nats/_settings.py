"""Settings of the NATS JetStream adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..transport._settings import TransportSettings

__all__ = ["NatsSettings"]


@dataclass(frozen=True)
class NatsSettings(TransportSettings):
    """Settings of the NATS JetStream transport (DESIGN §8): every field of
    :class:`~rxpipe.transport.TransportSettings`, with ``url`` a ``nats://host:port`` (``tls://``
    for TLS) server URL. ``stream`` names the JetStream streams and the subject prefix
    (characters other than letters, digits, ``_`` and ``-`` become ``_``); ``group`` the durable
    pull consumer of the workers; ``visibility_timeout_s`` is its ``ack_wait``, ``max_deliveries
    + 1`` its ``max_deliver`` and ``max_backlog`` its ``max_ack_pending``."""

    schemes: ClassVar[tuple[str, ...]] = ("nats://", "tls://")

    url: str = "nats://127.0.0.1:4222"
