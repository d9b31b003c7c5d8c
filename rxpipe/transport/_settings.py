"""Settings every broker adapter shares (DESIGN §8); each broker subclasses them."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import urlsplit, urlunsplit

__all__ = ["TransportSettings", "default_consumer", "public_url"]


def default_consumer() -> str:
    """``<hostname>-<pid>``: unique per worker process, stable for its lifetime."""
    return f"{socket.gethostname()}-{os.getpid()}"


def public_url(url: str) -> str:
    """``url`` without its password (for logs and the CLI's "serving on" line)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username + '@' if parts.username else ''}{host}{':' + str(parts.port) if parts.port else ''}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True)
class TransportSettings:
    """What gateways and workers on one broker agree on, and the bounds of both sides.

    url: the broker (its scheme picks the adapter: ``redis://``, ``nats://``).
    stream: the request queue's name. group: the workers' consumer group (durable consumer).
    consumer: this worker's name in the group (default ``<host>-<pid>``).
    max_backlog: requests admitted and not yet acknowledged by a worker, at most; the gateway
        refuses (429 ``queue_full``) beyond it.
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

    schemes: ClassVar[tuple[str, ...]] = ()

    url: str = ""
    stream: str = "rxpipe:requests"
    group: str = "workers"
    consumer: str = field(default_factory=default_consumer)
    max_backlog: int = 1000
    visibility_timeout_s: float = 30.0
    block_ms: int | None = None
    connect_timeout_s: float = 2.0
    command_timeout_s: float = 5.0
    refresh_interval_s: float = 0.25
    backoff_base_s: float = 0.05
    backoff_cap_s: float = 2.0
    reply_ttl_s: float = 60.0
    max_deliveries: int = 5
    credit_window: int = 8
    credit_resend_s: float = 0.5
    stall_timeout_s: float | None = None
    cancel_memory_s: float = 60.0

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(self.schemes):
            names = ", ".join(s.removesuffix("//") + "//" for s in self.schemes)
            raise ValueError(f"the broker url must start with {names}, got {self.url!r}")
        for name in ("stream", "group", "consumer"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty string, got {value!r}")
        for name in ("max_backlog", "max_deliveries", "credit_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("visibility_timeout_s", "connect_timeout_s", "command_timeout_s", "refresh_interval_s",
                     "backoff_base_s", "backoff_cap_s", "reply_ttl_s", "credit_resend_s", "cancel_memory_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
        stall = self.stall_timeout_s
        if stall is not None and (isinstance(stall, bool) or not isinstance(stall, (int, float)) or not stall > 0):
            raise ValueError(f"stall_timeout_s must be > 0 seconds (or None), got {stall!r}")
        if self.block_ms is not None and (isinstance(self.block_ms, bool) or not isinstance(self.block_ms, int)
                                          or self.block_ms < 1):
            raise ValueError(f"block_ms must be an int >= 1 ms (or None), got {self.block_ms!r}")

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
