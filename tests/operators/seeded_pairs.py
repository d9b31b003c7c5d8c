"""One operator configuration checked against reactivex 6.1 with seeded parameters.

A *pair factory* takes a seeded ``random.Random`` and returns ``(rxpipe operator, reactivex
operator)`` built with the same arguments. :func:`check_seeded_cases` compares the two on the
differential harness's seeded inputs under unbounded demand; :func:`check_random_demand` runs
rxpipe's under random ``request(n)`` patterns (:func:`random_demand.drive`) and compares what it
delivered with reactivex's notifications for the same items.
"""

from __future__ import annotations

import random
import zlib
from typing import Any, Callable, Sequence

from rxpipe.testing import TestSubscriber

from .differential import Case, Note, cases, note_of_error, through_reactivex, through_rxpipe
from .random_demand import Run, drive

__all__ = ["PairFactory", "check_seeded_cases", "check_random_demand", "notes"]

PairFactory = Callable[[random.Random], tuple[Any, Any]]


def notes(ts: TestSubscriber[Any]) -> list[Note]:
    """What ``ts`` received, as the harness's notifications."""
    out: list[Note] = [("N", v) for v in ts.values]
    if ts.error is not None:
        out.append(note_of_error(ts.error))
    elif ts.completed:
        out.append(("C",))
    return out


def check_seeded_cases(name: str, make_pair: PairFactory, count: int) -> int:
    """Assert equal notifications on ``count`` seeded inputs (seeded by ``name``); return ``count``."""
    for i, case in enumerate(cases(seed=zlib.crc32(name.encode()), count=count)):
        ours, theirs = make_pair(random.Random(f"{name}:{i}"))
        assert through_rxpipe(ours, case) == through_reactivex(theirs, case), case
    return count


def check_random_demand(name: str, make_pair: PairFactory, *, runs: int = 6, sizes: Sequence[int] = (0, 1, 5, 40, 150),
                        never_unbounded: bool = False,
                        check: Callable[[Any], Callable[[Run], None] | None] = lambda op: None) -> None:
    """``runs`` random demand runs over seeded items; each delivers what reactivex emits.

    ``check(operator)`` may return an extra per-step check for :func:`random_demand.drive`.
    """
    for seed in range(runs):
        rng = random.Random(f"{name}:demand:{seed}")
        items = [rng.randint(0, 9) for _ in range(rng.choice(tuple(sizes)))]
        ours, theirs = make_pair(rng)
        run = drive(ours, items, seed, never_unbounded=never_unbounded, check=check(ours))
        assert notes(run.ts) == through_reactivex(theirs, Case(tuple(items))), (seed, len(items))
