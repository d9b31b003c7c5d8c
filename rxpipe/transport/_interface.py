"""What a broker adapter provides (DESIGN §8, "One transport interface").

The demand logic, the reply routing, credit, cancel and the clocks live once, in
:mod:`rxpipe.transport`; an adapter only moves bytes. Two halves:

- :class:`GatewayBroker` (the gateway side): put a request on the queue (and take one back off it
  while no worker has read it), read the queue's state (:class:`Snapshot`: backlog, live
  gateways and workers, the broker's clock), read this gateway's reply channel, write the
  control channel (cancel and credit messages to every worker).
- :class:`WorkerBroker` (the worker side): one bounded read of at most ``n`` requests
  (:class:`Delivery` items, each the handle of one ack), ack, keep held requests from being
  redelivered while they run (``in_progress``), write replies, read the control channel, publish
  this worker's liveness and pause.

Every time an adapter reports is the broker's clock (Redis ``TIME`` and stream ids, NATS server
timestamps), in seconds since the Unix epoch; no host clock crosses the wire. Errors: an adapter
raises one of its ``transient`` exception types while the broker is unreachable (the callers
retry with backoff); anything else is a refused command.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["GatewayBroker", "WorkerBroker", "Delivery", "Snapshot", "WorkerBeat", "WriteOp", "BrokerBusyError",
           "CONTROL_MAX_MESSAGES"]

#: the control channel (cancels and credit) keeps about this many messages, oldest dropped first
#: (Redis ``XADD MAXLEN ~``, NATS ``max_msgs``): workers read each within a second of its write
CONTROL_MAX_MESSAGES = 10_000


class BrokerBusyError(Exception):
    """A command could not be sent in time although the broker may well be up: every connection
    of the adapter's pool stayed busy (Redis: no pooled connection came free within
    ``pool_timeout_s``). An adapter raises a subclass that is also one of its ``transient``
    types (it is retried the same way), and the logs say it as what it is, never "unreachable"."""


@dataclass(slots=True)
class Delivery:
    """One request delivered to this worker.

    ``key``: the adapter's handle (Redis entry id, NATS message); ``payload``: the request's bytes
    (None: deleted while pending, e.g. withdrawn by its gateway); ``deliveries``: how many times
    the broker delivered it (1 the first time); ``stored_s``: broker time when it was queued;
    ``ref``: what else the adapter needs to settle it (the NATS message).
    """

    key: Any
    payload: bytes | None
    deliveries: int = 1
    stored_s: float | None = None
    ref: Any = None


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    """A worker's last heartbeat, in broker time: when it beat, until when its engine is paused
    by its backend (0: not paused), and the model its engine serves (None: not said)."""

    at_s: float
    pause_until_s: float
    model: str | None = None


@dataclass(slots=True)
class Snapshot:
    """The queue seen by one gateway refresh.

    ``backlog``: requests queued and not yet acknowledged; ``now_s``: the broker's clock at the
    read; ``gateways``: last registration (broker time) of each gateway; ``workers``: each worker's
    last :class:`WorkerBeat`; ``reset``: the broker lost its data (this gateway's reply channel
    is gone): requests waiting for an answer will never get one.
    """

    backlog: int
    now_s: float
    gateways: dict[str, float] = field(default_factory=dict)
    workers: dict[str, WorkerBeat] = field(default_factory=dict)
    reset: bool = False


@dataclass(slots=True)
class WriteOp:
    """One queued write of a :class:`~rxpipe.transport._writer.Writer`: ``kind`` is the
    adapter's operation name (``"publish"``, ``"withdraw"``, ``"control"``, ``"reply"``,
    ``"ack"``...), ``args`` its arguments, ``done(result)`` called with its result or the
    exception that failed it."""

    kind: str
    args: tuple[Any, ...]
    done: Any = None


class _Broker(ABC):
    #: exception types meaning "the broker is unreachable now" (retry later)
    transient: tuple[type[BaseException], ...] = (OSError,)
    #: the broker as logs name it ("Redis lost", "NATS is back")
    name: str = "the broker"
    #: called as soon as the adapter sees its connection go away (before a command fails: a
    #: client that buffers through a reconnect raises nothing), and when it is back; set by the
    #: sink or source
    on_lost: Callable[[BaseException], None] | None = None
    on_back: Callable[[], None] | None = None

    @property
    def reachable(self) -> bool:
        """False while the adapter knows its connection is down (a success seen meanwhile, e.g.
        a read that only waited, does not mean the broker is back)."""
        return True

    @abstractmethod
    async def open(self) -> None:
        """Connect (raises a transient error when the broker is unreachable: the caller retries
        in the background)."""

    @abstractmethod
    async def close(self) -> None:
        """Let writes in flight finish and disconnect."""

    @abstractmethod
    async def write(self, ops: list[WriteOp]) -> list[Any]:
        """Send ``ops`` in order, in as few round trips as the broker allows; one result (or the
        exception of a refused operation) per op. Raises a transient error when none was sent."""


class GatewayBroker(_Broker):
    """The gateway side. Write ops: ``("publish", payload)`` → a token for ``withdraw``;
    ``("withdraw", token)``; ``("control", payload)`` (to every worker)."""

    #: where workers send this gateway's replies (set before :meth:`open`)
    reply_to: str

    @abstractmethod
    async def snapshot(self, gateway_id: str) -> Snapshot:
        """Register ``gateway_id`` as alive (broker time) and read the queue's state."""

    @abstractmethod
    async def read_replies(self, block_s: float) -> list[bytes]:
        """Reply messages for this gateway, in order; waits up to ``block_s`` for the first."""

    async def leave(self, gateway_id: str) -> None:
        """Unregister (best effort: the broker may be down)."""


class WorkerBroker(_Broker):
    """The worker side. Write ops: ``("reply", reply_to, payload, terminal)`` (``terminal``: the
    request's last message; it is stored before any later op is sent), ``("ack", delivery)``,
    ``("release", delivery)`` (give it back unacknowledged: NATS ``-NAK``, redelivered at once;
    Redis leaves it pending, claimed after the visibility timeout)."""

    @abstractmethod
    async def fetch(self, n: int, block_s: float) -> list[Delivery]:
        """One bounded read: at most ``n`` requests (requests another worker left unacknowledged
        past the visibility timeout first); waits up to ``block_s`` for the first."""

    @abstractmethod
    async def read_control(self, block_s: float) -> list[tuple[bytes, float]]:
        """Control messages (payload, broker time it was written) since the last read; waits up
        to ``block_s`` for the first. The first call starts at the channel's present end."""

    @abstractmethod
    async def heartbeat(self, consumer: str, pause_s: float, held: list[Delivery], model: str | None = None) -> float:
        """Publish this worker's liveness, engine pause (``pause_s`` from now, on the broker's
        clock) and the model its engine serves; keep ``held`` deliveries from redelivery (in
        progress); return the broker's time."""

    #: how often :meth:`housekeeping` runs (s)
    housekeeping_s: float = 1.0

    async def housekeeping(self) -> None:
        """Periodic upkeep (Redis: trim acknowledged entries)."""

    async def leave(self, consumer: str) -> None:
        """Unregister (best effort)."""
