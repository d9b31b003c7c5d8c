"""``limit_rate``: Reactor's limitRate, i.e. a backpressured buffer with explicit tides.

Requests ``high_tide`` at subscribe, then ``low_tide`` each time ``low_tide`` items went
downstream. It is the ``"backpressure"`` buffer with a chosen replenish amount, so it reuses
:class:`operators._buffer.BackpressureBufferSubscription` (one state machine, one drain loop).
"""

from __future__ import annotations

from typing import Any

from rxpipe._protocol import Subscriber
from rxpipe.flowable import Flowable
from rxpipe.stage import Replenisher

from ._buffer import BackpressureBufferSubscription

__all__ = ["LimitRateFlowable"]


class LimitRateFlowable(Flowable[Any]):
    """The stage ``limit_rate(high_tide, low_tide)``."""

    kind = "limit_rate"
    passes_capabilities = True

    def __init__(self, source: Flowable[Any], high_tide: int, low_tide: int, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.high_tide = high_tide
        self.low_tide = low_tide

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        replenisher = Replenisher(self.high_tide, self.low_tide)
        self.source._subscribe(BackpressureBufferSubscription(subscriber, replenisher, self.name))
