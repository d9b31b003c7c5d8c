"""Hot and multicast: ``broadcast`` (one upstream, ``n`` branches at the pace of the slowest).
"""

from __future__ import annotations

from rxpipe.flowable import Operator

from ._args import check_int_arg
from ._broadcast import BroadcastFlowable

__all__ = ["broadcast"]


def broadcast(n: int, *, name: str | None = None) -> Operator:
    """Send every item to ``n`` branches, at the pace of the slowest: ``a, b = f.pipe(broadcast(2))``.

        source:  -x-y-z-|
        a:       ^1  ^2
        b:       ^5
        upstream: ^1 ^2                  min over the branches' total demand
        a, b:    -x--y-z-|               both get every item

    Returns a Flowable whose ``branches`` (a tuple of ``n`` Flowables) it unpacks into (also
    ``result[k]``); subscribing to the result itself signals ``TypeError``. Each branch takes one
    subscriber; upstream is subscribed once all ``n`` branches are (Reactor
    ``publish().autoConnect(n)``); when the run ends the branches may be subscribed again, which
    subscribes upstream again.
    Demand: upstream has been asked, in total, for the minimum over the live branches of what each
    asked in total, so every item is wanted by every live branch and nothing queues. A cancelled
    branch stops counting (the others may get more at once); all cancelled → upstream cancelled.
    Signals: ValueError (raised here) for ``n < 1``; a second subscriber to a branch in one run
    gets ``ProtocolViolationError``; upstream errors and completion reach every live branch;
    an upstream emitting beyond demand signals ``MissingBackpressureError`` and is cancelled.
    Anchor: Akka ``Broadcast`` (backpressures on the slowest), Reactor ``publish().autoConnect(n)``.
    """
    check_int_arg("broadcast", "n", n, 1)
    return lambda source: BroadcastFlowable(source, n, name)
