"""The edge's credit as it travels in every answer (DESIGN §8b "Credit across the HTTP hop").

One snapshot (:class:`Credit`) of the state the edge already keeps, read when an answer's head
goes out, never a second book:

- ``free_slots``: the engines' free sequence slots (``Engine.free_slots``, summed over the
  available engines; a balance's replicas count each);
- ``queue_room``: admissions the edge would take now (its outstanding downstream demand: the
  queue behind it asks one more per departure), 0 while draining or unavailable;
- ``drain_per_s``: the drain rate the edge measures (:class:`~rxpipe.serving._drain.DrainMeter`,
  starts per second while requests waited), 0 before one is measured;
- ``queue_duration_ms``: the estimated wait of one more admission (backlog / drain rate; with no
  rate yet, backlog × the p90 service time / slots), 0 with no backlog.

As headers (:func:`credit_headers`): ``x-rxpipe-free-slots``, ``x-rxpipe-queue-room``,
``x-rxpipe-drain-per-s`` and llm-d's draft response-feedback headers from the same numbers
(``x-llm-d-flow-band-headroom-requests`` = queue room, ``x-llm-d-flow-queue-duration-ms``; on a
refusal ``x-llm-d-request-dropped-reason``: the refusal's reason label), and
``x-rxpipe-credit-seq``: the snapshot's number, so a reader of answers on several connections
keeps the latest word, not the last to arrive. ``GET /v1/credit`` answers the same numbers as
JSON, with the headers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..serving import Engine, Replicas
from ._policy import DrainMeter

__all__ = [
    "Credit",
    "credit_of",
    "credit_headers",
    "slot_engines",
    "FREE_SLOTS",
    "QUEUE_ROOM",
    "DRAIN_PER_S",
    "LLMD_HEADROOM",
    "LLMD_QUEUE_MS",
    "LLMD_DROPPED",
    "CREDIT_PATH",
    "CREDIT_SEQ",
    "ROUTER_ID",
    "SEEN",
    "router_id",
    "MAX_ADVERTISED",
]

FREE_SLOTS = "x-rxpipe-free-slots"
QUEUE_ROOM = "x-rxpipe-queue-room"
DRAIN_PER_S = "x-rxpipe-drain-per-s"
LLMD_HEADROOM = "x-llm-d-flow-band-headroom-requests"
LLMD_QUEUE_MS = "x-llm-d-flow-queue-duration-ms"
LLMD_DROPPED = "x-llm-d-request-dropped-reason"
CREDIT_SEQ = "x-rxpipe-credit-seq"
CREDIT_PATH = "/v1/credit"
#: the header a router names itself with, on its credit watch and on every call (a token of at
#: most 64 characters: letters, digits, ``-``, ``_``): the watch's words then say how many of its
#: calls the edge has decided (``_credit_watch``)
ROUTER_ID = "x-rxpipe-router-id"
#: the answer header saying how many of the calling router's calls the edge has decided
SEEN = "x-rxpipe-seen"
#: an unbounded demand (no queue behind the edge asks in counts) is advertised as this many
MAX_ADVERTISED = 1 << 30


@dataclass(frozen=True, slots=True)
class Credit:
    """The edge's credit at one moment: ``free_slots`` (sequences), ``queue_room`` (requests),
    ``drain_per_s`` (requests per second), ``queue_duration_ms`` (milliseconds, integer), ``seq``
    (the snapshot's number, increasing per snapshot of one edge process)."""

    free_slots: int
    queue_room: int
    drain_per_s: float
    queue_duration_ms: int
    seq: int = 0

    def as_json(self) -> dict[str, Any]:
        """The body of ``GET /v1/credit``."""
        return {
            "free_slots": self.free_slots,
            "queue_room": self.queue_room,
            "drain_per_s": self.drain_per_s,
            "queue_duration_ms": self.queue_duration_ms,
            "seq": self.seq,
        }


def router_id(value: str | None) -> str | None:
    """``value`` of an ``x-rxpipe-router-id`` header if it is a valid id, else None."""
    if value is None or not 0 < len(value) <= 64 or not value.replace("-", "").replace("_", "").isalnum():
        return None
    return value


def slot_engines(engines: list[Any]) -> list[Engine]:
    """The engines whose slots the edge's credit counts, of what its pipeline's stages name as
    their engine: an :class:`~rxpipe.serving.Engine`, each replica of a balance's
    :class:`~rxpipe.serving.Replicas`; not what has no slots of its own here (a transport sink's
    view of remote workers)."""
    found: list[Engine] = []
    for engine in engines:
        for one in engine.engines if isinstance(engine, Replicas) else (engine,):
            if isinstance(one, Engine):
                found.append(one)
    return found


def credit_of(
    engines: list[Any], meter: DrainMeter, demand: int, taking_work: bool, now: float, seq: int = 0
) -> Credit:
    """The credit of an edge whose pipeline has ``engines``, drain ``meter`` and outstanding
    ``demand`` (requests), at loop time ``now``; ``taking_work`` False (draining, unavailable):
    no room at all."""
    free = 0
    slots = 0
    for engine in slot_engines(engines):
        slots += engine.max_num_seqs
        if taking_work and engine.available:
            free += engine.free_slots
    room = min(demand, MAX_ADVERTISED) if taking_work else 0
    rate = meter.rate(now)
    backlog = meter.backlog
    if backlog == 0:
        wait_s = 0.0
    elif rate:
        wait_s = backlog / rate
    else:
        wait_s = backlog * meter.service_time() / max(1, slots)
    return Credit(free, room, round(rate, 3) if rate else 0.0, math.ceil(wait_s * 1000), seq)


def credit_headers(credit: Credit, dropped_reason: str | None = None) -> dict[str, str]:
    """The answer headers of ``credit`` (and ``x-llm-d-request-dropped-reason`` on a refusal)."""
    room = str(credit.queue_room)
    headers = {
        FREE_SLOTS: str(credit.free_slots),
        QUEUE_ROOM: room,
        DRAIN_PER_S: f"{credit.drain_per_s:g}",
        LLMD_HEADROOM: room,
        LLMD_QUEUE_MS: str(credit.queue_duration_ms),
        CREDIT_SEQ: str(credit.seq),
    }
    if dropped_reason is not None:
        headers[LLMD_DROPPED] = dropped_reason
    return headers
