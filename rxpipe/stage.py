"""``rxpipe.stage``: the public way to write an operator (DESIGN §3 "Writing a stage").

A stage is a small state machine between an upstream and a downstream. It is built from two
halves, each written once in rxpipe and used by every built-in operator:

- **toward downstream**: :class:`DrainSubscription` (the outstanding demand ``requested``, the
  ``cancelled`` flag and the serial drain loop, §1.3/§3.3) or :class:`QueueDrainSubscription`
  (the same over a FIFO ``queue``, followed by the upstream's terminal signal);
- **toward upstream**: :class:`UpstreamLink` (the outstanding counter, the prefetch/replenish
  rule, ``MissingBackpressureError`` on overrun, cancel-once, the terminal flag).

Shedding stages queue-or-drop with :func:`offer` and drop-and-tell with :func:`shed` /
:func:`discard_all` (a dropped item learns it through ``on_discard(reason)``); a stage declares what
it emits with :class:`Capabilities` (``Flowable.capabilities``) instead of being recognised by its
name. A complete example is in the README ("Write your own operator"), the rules in
``docs/architecture.md``.

Every signal is a plain synchronous call on the event loop's thread (Reactive Streams 1.0.4).
"""

from __future__ import annotations

from ._capabilities import NO_CAPABILITIES, Capabilities
from ._demand import (
    EMPTY_SUBSCRIPTION,
    DrainSubscription,
    InternalSubscriber,
    QueueDrainSubscription,
    Replenisher,
    add_demand,
    bad_request,
    discard,
    valid_demand,
)
from ._link import LINK_SLOTS, SerialLoop, SheddingStage, UpstreamLink, discard_all, offer, shed
from .metrics import StageCounters, StageStatistics

__all__ = [
    "UpstreamLink",
    "LINK_SLOTS",
    "DrainSubscription",
    "QueueDrainSubscription",
    "Replenisher",
    "SerialLoop",
    "offer",
    "shed",
    "SheddingStage",
    "discard",
    "discard_all",
    "Capabilities",
    "NO_CAPABILITIES",
    "StageCounters",
    "StageStatistics",
    "InternalSubscriber",
    "EMPTY_SUBSCRIPTION",
    "add_demand",
    "valid_demand",
    "bad_request",
]
