"""``rxpipe.stage``: the public way to write an operator (DESIGN §3 "Writing a stage").

Two layers, both public and documented (``docs/architecture.md`` says when to use which):

**The Stage API** (write operators here): subclass :class:`Stage`, implement ``on_next`` (and the
optional hooks ``on_start``, ``on_complete``, ``on_error``, ``on_cancel``, ``on_timer``,
``on_request``, ``on_input_*``), call the actions ``emit``, ``complete``, ``fail``, ``drop``,
``start_timer``, ``cancel_timer``, ``open_input``, and make the factory with :func:`operator`.
The kit owns upstream credit (``prefetch``), the output queue, termination order, timers,
exceptions from hooks and the statistics exported as ``rxpipe_stage_*`` metrics; no credit
arithmetic and no underscore name is left to the author. Anchor: Akka's ``GraphStageLogic``.
``rxpipe.testing.check_operator`` checks any operator against the contract.

**The low-level layer** (for hot paths: the fused chain, ``buffer``, the executor). A stage
is built from two halves, each written once in rxpipe and used by every built-in operator:

- **toward downstream**: :class:`DrainSubscription` (the outstanding demand ``requested``, the
  ``cancelled`` flag and the serial drain loop, §1.3/§3.3) or :class:`QueueDrainSubscription`
  (the same over a FIFO ``queue``, followed by the upstream's terminal signal);
- **toward upstream**: :class:`UpstreamLink` (the outstanding counter, the prefetch/replenish
  rule, ``MissingBackpressureError`` on overrun, cancel-once, the terminal flag).

Shedding stages queue-or-drop with :func:`offer` and drop-and-tell with :func:`shed` /
:func:`discard_all` (a dropped item learns it through ``on_discard(reason)``); a stage declares what
it emits with :class:`Capabilities` (``Flowable.capabilities``) instead of being recognised by its
name. A complete example is in the manual (docs/tutorials/operator.md), the rules in
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
from ._stage_logic import Stage
from ._stage_run import Input, operator
from .metrics import StageCounters, StageStatistics, set_debug

__all__ = [
    "Stage",
    "operator",
    "Input",
    "set_debug",
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
