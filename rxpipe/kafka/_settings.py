"""Settings of the Kafka adapter, and the topic names derived from them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..settings import Schema, SettingError, schema_of, setting
from ..transport._settings import SCHEMES, TransportSettings

__all__ = ["KafkaSettings", "KAFKA_SETTINGS", "topics", "MAX_TOPIC_LENGTH"]

#: Kafka's limit on a topic name (characters)
MAX_TOPIC_LENGTH = 249
#: the longest suffix the adapter adds to ``stream`` (``.replies.`` and a gateway id of up to 64)
_LONGEST_SUFFIX = len(".replies.") + 64


def _kafka_url(value: Any) -> str:
    if not isinstance(value, str) or not value.startswith(SCHEMES["kafka"]) or not value[len("kafka://"):]:
        raise ValueError("not a Kafka URL")
    for server in value[len("kafka://"):].split(","):
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError("not a Kafka URL")
    return value


def _token(text: str) -> str:
    """``text`` as part of a legal Kafka topic name: characters other than ``[A-Za-z0-9._-]``
    become ``.`` (``rxpipe:requests`` → ``rxpipe.requests``)."""
    return re.sub(r"[^A-Za-z0-9._-]", ".", text)


@dataclass(frozen=True)
class KafkaSettings(TransportSettings):
    """Settings of the Kafka transport (DESIGN §8 "Kafka"), each a typed setting
    (``schema_of(KafkaSettings)``): every field of :class:`~rxpipe.transport.TransportSettings`,
    with ``url`` a ``kafka://host:port`` (several bootstrap servers: ``kafka://h1:9092,h2:9092``).

    ``stream`` names the topics (characters other than ``[A-Za-z0-9._-]`` become ``.``, Kafka's
    rule): requests on ``<stream>``, cancels and credit on ``<stream>.control``, liveness on
    ``<stream>.live``, each gateway's replies on ``<stream>.replies.<gateway>``. ``group`` is the
    workers' consumer group. ``visibility_timeout_s`` does not apply: a dead worker's requests
    move with its partitions once the group's session (``session_timeout_ms``) has expired.
    ``max_deliveries`` counts the deliveries of the first uncommitted request of a partition
    (on the ``<stream>.heads`` topic): Kafka itself counts none.

    Kafka's own: ``partitions`` (of the request topic, created with it: at most this many
    workers get work), ``session_timeout_ms`` / ``heartbeat_interval_ms`` (the group's liveness
    of a worker), ``max_poll_interval_ms`` (the longest a worker may go without polling: it
    polls with its partitions paused while its engine has no free slot, so a long generation
    never reaches it; DESIGN's C16), ``fetch_max_wait_ms`` (how long a fetch waits at the
    broker for records: the latency of every hop on a broker that answers a waiting fetch only
    at its end, as the test broker does).
    """

    url: str = setting("kafka://127.0.0.1:9092", "URL", "the Kafka bootstrap server(s): kafka://host:port[,host:port]",
                       parse=_kafka_url, expected="a kafka://host:port URL")
    stream: str = setting("rxpipe.requests", "str", "the request topic and the prefix of the others (Kafka topic "
                                                    "names: other characters than [A-Za-z0-9._-] become .)",
                          allow_empty=False)
    partitions: int = setting(8, "int", "partitions of the request topic when it is created (at most this many workers "
                                        "get work)", minimum=1)
    session_timeout_ms: int = setting(6000, "int", "a worker whose heartbeats stop this long leaves the group and its "
                                                   "partitions move (ms)", minimum=1)
    heartbeat_interval_ms: int = setting(1000, "int", "how often a worker heartbeats the group coordinator (ms)",
                                         minimum=1)
    max_poll_interval_ms: int = setting(10000, "int", "a worker that does not poll this long leaves the group (ms; it "
                                                      "polls with paused partitions while its engine is full)",
                                        minimum=1)
    fetch_max_wait_ms: int = setting(20, "int", "how long a fetch waits at the broker for records (ms)", minimum=0)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise SettingError(f"setting heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                               f"session_timeout_ms ({self.session_timeout_ms})", "heartbeat_interval_ms")
        if len(_token(self.stream)) + _LONGEST_SUFFIX > MAX_TOPIC_LENGTH:
            raise SettingError(f"setting stream must be at most {MAX_TOPIC_LENGTH - _LONGEST_SUFFIX} characters (Kafka "
                               f"topic names are at most {MAX_TOPIC_LENGTH}, with suffixes), got {len(self.stream)}",
                               "stream")

    @property
    def bootstrap_servers(self) -> list[str]:
        return self.url[len("kafka://"):].split(",")


class topics:  # noqa: N801 - a namespace of the names derived from the settings
    """The topics of ``settings``: ``requests``, ``control``, ``live``, ``heads``, ``replies_prefix``."""

    def __init__(self, settings: KafkaSettings) -> None:
        self.requests = _token(settings.stream)
        self.control = f"{self.requests}.control"
        self.live = f"{self.requests}.live"
        self.heads = f"{self.requests}.heads"
        self.replies_prefix = f"{self.requests}.replies."

    def replies(self, gateway_id: str) -> str:
        return self.replies_prefix + _token(gateway_id)[:64]


#: :class:`KafkaSettings` as a table (``rxpipe.settings``)
KAFKA_SETTINGS: Schema = schema_of(KafkaSettings)
