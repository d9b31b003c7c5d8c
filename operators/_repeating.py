"""Repeating the source: ``repeat``, ``do_while``, ``while_do`` (DESIGN §3, third round).

Each subscribes to the upstream again when it completes (``_recovery.Repeat``), on the loop's
next turn, asking the new run for the demand still outstanding.
"""

from __future__ import annotations

from typing import Any, Callable

from rxpipe.flowable import Flowable, Operator

from ._args import check_callable, check_int_arg
from ._recovery import do_while_stage, repeat_stage, while_do_stage

__all__ = ["repeat", "do_while", "while_do"]


def repeat(repeat_count: int | None = None, *, name: str | None = None) -> Operator:
    """Emit the source's items, then subscribe to it again at its completion: ``repeat_count``
    runs in all (None: forever).

        source:    -a|
        demand:    ^*
        output:    -a-a-a|       repeat(3): three runs, then the completion

    A cold source replays from its start. ``repeat(0)`` completes at once, asking the source
    nothing (reactivex's empty repeat). Errors are not repeated (``retry`` does that).
    Demand: passed through; each new run is asked for the outstanding demand only (what
    downstream asked for and did not get). A run is subscribed on the loop's next turn, never
    inside the completion signal, so ``repeat()`` over a synchronous source does not monopolise
    the event loop (and a cancel stops it).
    Signals: ValueError / TypeError (raised here) for a bad count; an error of any run is
        signalled; cancel reaches the current run and stops a pending one.
    Anchor: reactivex ``repeat``; Reactor ``repeat(n)`` counts repeats, not runs (``repeat(n)``
        there is ``repeat(n + 1)`` here).
    """
    if repeat_count is not None:
        check_int_arg("repeat", "repeat_count", repeat_count, 0)
    return repeat_stage(repeat_count, name=name)


def do_while(condition: Callable[[Flowable[Any]], Any], *, name: str | None = None) -> Operator:
    """Emit the source's items, then run it again while ``condition(source)`` holds, asked after
    every run.

        source:    -a|
        demand:    ^*
        output:    -a-a|         do_while(a condition true once): two runs

    Demand: as ``repeat``'s. Signals: TypeError (raised here) for a non-callable; ``condition``
        raising cancels and signals the exception.
    Anchor: reactivex ``do_while``; Reactor ``repeat(BooleanSupplier)``.
    """
    check_callable("do_while", condition)
    return do_while_stage(None, condition, name=name)


def while_do(condition: Callable[[Flowable[Any]], Any], *, name: str | None = None) -> Operator:
    """Run the source while ``condition(source)`` holds, asked before every run (the first too:
    false at once, the stream completes empty).

        source:    -a|
        demand:    ^*
        output:    -a-a|         while_do(a condition true twice): two runs

    Demand: as ``repeat``'s. Signals: TypeError (raised here) for a non-callable; ``condition``
        raising cancels and signals the exception.
    Anchor: reactivex ``while_do``.
    """
    check_callable("while_do", condition)
    return while_do_stage(None, condition, True, name=name)
