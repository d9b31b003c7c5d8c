"""A seeded random demand run for one operator over a hand-driven upstream (DESIGN §9).

:func:`drive` subscribes a :class:`~rxpipe.testing.TestSubscriber` behind the strict boundary
(an emission beyond demand shows as ``MissingBackpressureError``) to ``operator(publisher)`` and
then, step by step, either requests a random ``n`` downstream or lets the publisher emit some of
what it was asked for (an honest upstream: never more). After every step it checks:

- delivered <= requested downstream, always;
- no stall: while downstream is owed items, the stream is open and the upstream still has
  items, something is requested of the upstream (a filter must ask again for what it dropped);
- ``never_unbounded``: no ``request(UNBOUNDED)`` upstream (reducers).

When every item was sent the upstream completes; at the end downstream asks for everything
left. The run returns the subscriber and the publisher for exact checks (values against
reactivex's, ``pub.requests``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe.flowable import Operator
from rxpipe.testing import TestPublisher, TestSubscriber

__all__ = ["Run", "drive"]


@dataclass
class Run:
    ts: TestSubscriber[Any]
    pub: TestPublisher[Any]
    sent: int


def drive(op: Operator, items: Sequence[Any], seed: int, *, never_unbounded: bool = False,
          max_steps: int = 5_000, check: Callable[[Run], None] | None = None) -> Run:
    """Run ``op`` over ``items`` under a random demand pattern (see the module doc)."""
    rng = random.Random(seed)
    pub = TestPublisher[Any]()
    ts = TestSubscriber[Any]()
    pub.pipe(op).subscribe(ts)
    run = Run(ts, pub, 0)
    completed_upstream = False

    def checks(where: str) -> None:
        assert not isinstance(ts.error, MissingBackpressureError), (where, ts.error)
        assert len(ts.values) <= ts.requested, (where, len(ts.values), ts.requested)
        if never_unbounded:
            assert UNBOUNDED not in pub.requests, (where, pub.requests)
        owed = ts.requested - len(ts.values)
        if owed and not ts.done and not pub.cancelled and run.sent < len(items):
            assert pub.outstanding > 0, f"stalled after {where}: owed {owed}, requests {pub.requests[-5:]}"
        if check is not None:
            check(run)

    for step in range(max_steps):
        if ts.done or (completed_upstream and not pub.has_subscribers):
            break
        if rng.random() < 0.35 or pub.outstanding == 0:
            n = rng.choice((1, 1, 1, 2, 3, 5, 8))
            ts.request(n)
            checks(f"request({n}) at step {step}")
        else:
            k = min(pub.outstanding, rng.randint(1, 4), len(items) - run.sent)
            for _ in range(k):
                pub.emit(items[run.sent])
                run.sent += 1
                checks(f"item #{run.sent} at step {step}")
                if ts.done or pub.cancelled:
                    break
        if run.sent == len(items) and not completed_upstream and not pub.cancelled:
            completed_upstream = True
            pub.complete()
            checks(f"completion at step {step}")
    if not ts.done:
        ts.request(UNBOUNDED)
        while not ts.done and pub.outstanding and run.sent < len(items):
            pub.emit(items[run.sent])
            run.sent += 1
        if not ts.done and not completed_upstream and not pub.cancelled:
            pub.complete()
        checks("the end")
    return run
