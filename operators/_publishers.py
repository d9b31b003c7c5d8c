"""What the second round's operators accept as another source: a Flowable or any Publisher."""

from __future__ import annotations

from typing import Any

import reactivex

from rxpipe import Publisher

__all__ = ["publisher_problem"]


def publisher_problem(value: Any) -> str | None:
    """Why ``value`` cannot be subscribed to as a source, or None if it can.

    A reactivex Observable has a ``subscribe`` method, so it looks like a Publisher, but it has
    no demand: it must be adapted with ``rx.from_observable(obs, capacity)`` (DESIGN §3).
    """
    if isinstance(value, reactivex.Observable):
        return (f"{value!r} is a reactivex Observable, which has no demand: adapt it with "
                f"rx.from_observable(observable, capacity)")
    if not isinstance(value, Publisher):
        return f"needs a Flowable or a Publisher, got {value!r}"
    return None
