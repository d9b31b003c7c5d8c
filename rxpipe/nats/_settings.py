"""Settings of the NATS JetStream adapter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..settings import Schema, schema_of, setting
from ..transport._settings import SCHEMES, TransportSettings

__all__ = ["NatsSettings", "NATS_SETTINGS"]


def _nats_url(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(SCHEMES["nats"]):
        raise ValueError("not a NATS URL")
    return value


@dataclass(frozen=True)
class NatsSettings(TransportSettings):
    """Settings of the NATS JetStream transport (DESIGN §8), each a typed setting
    (``schema_of(NatsSettings)``): every field of :class:`~rxpipe.transport.TransportSettings`,
    with ``url`` a ``nats://host:port`` (``tls://`` for TLS) server URL. ``stream`` names the
    JetStream streams and the subject prefix (characters other than letters, digits, ``_`` and
    ``-`` become ``_``); ``group`` the durable pull consumer of the workers;
    ``visibility_timeout_s`` is its ``ack_wait``, ``max_deliveries + 1`` its ``max_deliver`` and
    ``max_backlog`` its ``max_ack_pending``."""

    url: str = setting("nats://127.0.0.1:4222", "URL", "the NATS server (nats:// or tls://), JetStream enabled",
                       parse=_nats_url, expected="a nats:// (or tls://) URL")


#: :class:`NatsSettings` as a table (``rxpipe.settings``)
NATS_SETTINGS: Schema = schema_of(NatsSettings)
