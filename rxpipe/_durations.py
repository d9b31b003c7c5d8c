"""Durations as rxpipe takes them: seconds (int or float) or a ``datetime.timedelta``.

reactivex takes ``timedelta | float`` for every duration (``interval(timedelta(...))``,
``debounce(duetime)``), so rxpipe does too (DESIGN §3 "RxPY names"). Only relative durations:
the loop's clock has no wall-clock epoch, so an absolute ``datetime`` stays a TypeError.
"""

from __future__ import annotations

from datetime import timedelta

__all__ = ["as_seconds", "one_of"]


def as_seconds(value: object) -> object:
    """``value.total_seconds()`` for a ``timedelta``; anything else unchanged (callers check it)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    return value


def one_of(op: str, ours_name: str, ours: object, rx_name: str, theirs: object) -> object:
    """One argument given under rxpipe's name or reactivex's (None: not given); both: TypeError;
    neither: TypeError naming reactivex's. For the sources (``timer``, ``interval``)."""
    if theirs is not None:
        if ours is not None:
            raise TypeError(f"{op}() got {ours_name} and {rx_name}=, two names of one argument")
        return theirs
    return ours
