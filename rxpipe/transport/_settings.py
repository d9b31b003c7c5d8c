"""Settings every broker adapter shares (DESIGN §8), typed fields of :mod:`rxpipe.settings`;
each broker subclasses them (``RedisSettings``, ``NatsSettings``)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from ..logs import public_url
from ..settings import Schema, Setting, check_fields, schema_of, setting
from ._registry import BUILTIN_ADAPTERS, known_schemes

__all__ = ["TransportSettings", "TRANSPORT_SETTINGS", "BROKER_URL", "SCHEMES", "broker_url", "default_consumer",
           "public_url"]

#: URL schemes of the shipped adapters, by adapter name (the registry's table, ``_registry``)
SCHEMES = {name: prefixes for name, (prefixes, _) in BUILTIN_ADAPTERS.items()}


def default_consumer() -> str:
    """``<hostname>-<pid>``: unique per worker process, stable for its lifetime."""
    return f"{socket.gethostname()}-{os.getpid()}"


def broker_url(value: Any) -> str:
    """``value`` if it is a URL of a supported broker (a :class:`~rxpipe.settings.Setting` parser;
    ValueError otherwise)."""
    if not isinstance(value, str) or not value.startswith(known_schemes()):
        raise ValueError("not a broker URL")
    return value


@dataclass(frozen=True)
class TransportSettings:
    """What gateways and workers on one broker agree on, and the bounds of both sides; each field
    a typed setting (``schema_of(RedisSettings)`` is their table; a wrong value raises
    :class:`~rxpipe.settings.SettingError` naming the field).

    url: the broker (its scheme picks the adapter: ``redis://``, ``nats://``, ``kafka://``).
    stream: the request queue's name. group: the workers' consumer group (durable consumer).
    consumer: this worker's name in the group (default ``<host>-<pid>``).
    max_backlog: requests admitted and not yet acknowledged by a worker, at most; the gateway
        refuses (429 ``queue_full``) beyond it.
    max_queue_wait_s: the wait bound of the gateway's admission (s): it admits no more requests
        than the workers drain in this time (the drain rate measured from its own requests'
        starts and ends on the workers, ``DrainMeter``), so what it admits starts within about
        this long instead of waiting behind ``max_backlog`` (at a drain of 8/s, 1,000 requests
        are 125 s deep: past every client's timeout); before a rate is measured only
        ``max_backlog`` bounds. None: only ``max_backlog``.
    visibility_timeout_s: a request delivered to a worker that neither acknowledged nor refreshed
        it this long is delivered to another worker (Redis ``XAUTOCLAIM`` min-idle-time, NATS
        ``ack_wait``). A live worker refreshes what it holds every third of it.
    block_ms: how long one blocking read waits (ms); default ``min(1000, visibility_timeout_s / 4)``.
    connect_timeout_s / command_timeout_s: connection and command timeouts (s).
    refresh_interval_s: the gateway re-reads the backlog this often (s); in between it counts its
        own admissions, so several gateways keep the bound within one interval.
    backoff_base_s / backoff_cap_s: retries after a broker error wait ``uniform(0, min(cap,
        base * 2**attempt))`` (full jitter).
    reply_ttl_s: a gateway's reply channel is kept this long (s) after the gateway was last seen.
    max_deliveries: a request delivered more than this many times (it took down or outlived that
        many workers: a poison request) is answered with an error and acknowledged.
    credit_window: token chunks a worker may send ahead of what the client's reader took (the
        credit window across hosts): the gateway holds at most this many chunks per stream plus
        its socket buffer (``stream_buffer_bytes``).
    credit_resend_s: the cumulative credit of a stream whose worker may be waiting for it is sent
        again this often (s), so a lost control message never stalls a stream for good.
    stall_timeout_s: a streamed answer whose reader gave no credit this long is ended at the
        gateway (finish reason ``"stalled"``) and cancelled on its worker (s; None: the worker's
        engine alone decides, with its own ``stall_timeout_s``).
    cancel_memory_s: how long a worker remembers a cancel for a request it has not read (s).
    """

    url: str = setting("", "URL", "the broker: redis://…, nats://… or kafka://… (its scheme picks the adapter)",
                       parse=broker_url, expected="a redis:// (or rediss://, unix://), nats:// (or tls://) or kafka:// "
                                                  "URL")
    stream: str = setting("rxpipe:requests", "str", "the request queue (Redis: the stream's key; NATS: the stream's "
                                                    "name and subject prefix)", allow_empty=False)
    group: str = setting("workers", "str", "the workers' consumer group (NATS: their durable pull consumer)",
                         allow_empty=False)
    consumer: str = setting(type="str", doc="this worker's name in the group", default_factory=default_consumer,
                            allow_empty=False, default_text="<host>-<pid>")
    max_backlog: int = setting(1000, "int", "requests queued and not yet acknowledged by a worker, at most (more get "
                                            "429)", minimum=1)
    max_queue_wait_s: float | None = setting(10.0, "number", "admit no more than the workers drain in this long "
                                                             "(s, measured drain); null: only max_backlog bounds",
                                             minimum=0, exclusive_minimum=True, nullable=True)
    visibility_timeout_s: float = setting(30.0, "number", "a request idle this long on a worker that stopped is run "
                                                          "elsewhere (s)", minimum=0, exclusive_minimum=True)
    block_ms: int | None = setting(None, "int", "BLOCK of every blocking read (ms); null: min(1000, "
                                                "visibility_timeout_s / 4)", minimum=1, nullable=True)
    connect_timeout_s: float = setting(2.0, "number", "socket connect timeout of commands (s)", minimum=0,
                                       exclusive_minimum=True)
    command_timeout_s: float = setting(5.0, "number", "socket read timeout of commands (s)", minimum=0,
                                       exclusive_minimum=True)
    refresh_interval_s: float = setting(0.25, "number", "how often a gateway re-reads the backlog from the broker "
                                                        "(s)", minimum=0, exclusive_minimum=True)
    backoff_base_s: float = setting(0.05, "number", "first retry delay after a broker error (s; doubles, full "
                                                    "jitter)", minimum=0, exclusive_minimum=True)
    backoff_cap_s: float = setting(2.0, "number", "longest retry delay after broker errors (s)", minimum=0,
                                   exclusive_minimum=True)
    reply_ttl_s: float = setting(60.0, "number", "a gateway's reply channel expires this long after it was last seen "
                                                 "(s)", minimum=0, exclusive_minimum=True)
    max_deliveries: int = setting(5, "int", "a request delivered more often than this fails (a poison request)",
                                  minimum=1)
    credit_window: int = setting(8, "int", "token chunks a worker may send ahead of a streamed answer's reader",
                                 minimum=1)
    credit_resend_s: float = setting(0.5, "number", "a stalled stream's cumulative credit is sent again this often "
                                                    "(s)", minimum=0, exclusive_minimum=True)
    stall_timeout_s: float | None = setting(None, "number", "a stream whose reader gives no credit this long is ended "
                                                            "at the gateway and on its worker (s); null: the worker's "
                                                            "engine decides", minimum=0, exclusive_minimum=True,
                                            nullable=True)
    cancel_memory_s: float = setting(60.0, "number", "how long a worker remembers a cancel for a request it has not "
                                                     "read (s)", minimum=0, exclusive_minimum=True)

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def block(self) -> int:
        """How long a blocking read waits, in ms."""
        if self.block_ms is not None:
            return self.block_ms
        return max(1, min(1000, int(self.visibility_timeout_s * 1000 / 4)))

    @property
    def block_s(self) -> float:
        return self.block / 1000

    @property
    def visibility_ms(self) -> int:
        return max(1, int(self.visibility_timeout_s * 1000))


#: :class:`TransportSettings` as a table (the pipelines pick theirs from it)
TRANSPORT_SETTINGS: Schema = schema_of(TransportSettings)

#: the one switch of the gateway and worker pipelines: the broker to use, by URL (DESIGN §8)
BROKER_URL = Setting("broker_url", None, "URL", "redis://…, nats://… or kafka://…: the broker between gateways and "
                     "workers; null: none", parse=broker_url, expected="a redis:// (or rediss://, unix://), nats:// "
                     "(or tls://) or kafka:// URL", nullable=True)
