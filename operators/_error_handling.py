"""Error handling: ``catch`` (continue with another Flowable), ``retry`` (subscribe again).
"""

from __future__ import annotations

from typing import Any, Callable

from rxpipe._protocol import Publisher
from rxpipe.flowable import Flowable, Operator

from ._args import check_int_arg
from ._publishers import publisher_problem
from ._recovery import catch_stage, retry_stage

__all__ = ["catch", "retry", "on_error_resume_next"]


def catch(handler: Flowable[Any] | Callable[[BaseException, Flowable[Any]], Flowable[Any]], *,
          name: str | None = None) -> Operator:
    """On an upstream error, continue with another Flowable instead of failing.

        source:    -a-b-#
        handler:   -c-d-|            subscribed when the source fails, asked for the 2 still owed
        demand:    ^4
        output:    -a-b--c-d-|

    ``handler`` is the Flowable to continue with, or ``handler(error, source) -> Flowable``
    (``source`` is the upstream, so ``lambda e, src: src`` subscribes to it again; raise to let
    the error through). Only the upstream's error is caught: the continuation's own error is
    signalled.
    Demand: passed through; the continuation inherits the outstanding demand (what downstream
    asked for and did not get), so nothing is requested twice.
    Signals: TypeError (raised here) for a handler that is neither a Publisher nor callable;
        the handler raising signals its exception; the handler returning no Flowable/Publisher
        signals TypeError. Cancel reaches whichever source is current.
    Anchor: reactivex ``catch(handler)``, Reactor ``onErrorResume``, Akka ``recoverWithRetries``.
    """
    problem = publisher_problem(handler)
    if problem is not None and (not callable(handler) or isinstance(handler, Publisher)):
        raise TypeError(f"catch(handler) needs a Flowable or a function (error, source) -> Flowable: {problem}")
    return catch_stage(handler, name=name)


def retry(retry_count: int | None = None, *, name: str | None = None) -> Operator:
    """On an upstream error, subscribe to the upstream again: ``retry_count`` subscriptions in all.

        source:    -a-#
        demand:    ^*
        output:    -a--a--a-#        retry(3): three subscriptions, then the third error

    ``retry_count`` counts subscriptions as reactivex does (``retry(3)`` = the first one and 2
    retries); None retries forever. The error of the last subscription is signalled. A cold
    source replays from its start: items delivered before an error are delivered again.
    Demand: passed through; each new subscription is asked for the outstanding demand only
    (what downstream asked for and did not get): what was delivered is never requested again.
    Re-subscribes on the loop's next turn, never inside the failing signal, so ``retry()`` over
    a source that fails at once does not monopolise the event loop (and a cancel stops it).
    Args: retry_count (subscriptions, int >= 1, or None: forever). ``retry(0)`` is a
        ValueError here; reactivex completes it without subscribing at all.
    Signals: ValueError/TypeError (raised here) for a bad count; cancel reaches the current
        subscription and stops a pending one.
    Anchor: reactivex ``retry(retry_count)``; Reactor ``retry(n)`` counts retries, not
        subscriptions (``retry(n)`` there is ``retry(n + 1)`` here).
    """
    if retry_count is not None:
        check_int_arg("retry", "retry_count", retry_count, 1)
    return retry_stage(retry_count, name=name)


def on_error_resume_next(second: Any, *, name: str | None = None) -> Operator:
    """Continue with ``second`` when the source ends, whether it completed *or failed*:
    ``rx.on_error_resume_next(source, second)``.

        source:    -a-#
        other:        -b|        subscribed when the source failed
        demand:    ^*
        output:    -a--b|

    ``second`` may be a Flowable, a Publisher, an awaitable, an iterable or a function
    ``(error or None) -> source``. Its own error is swallowed too (reactivex): the stream
    completes after it.
    Demand: one source at a time, asked exactly what downstream still wants; the outstanding
    demand carries over to ``second``.
    Anchor: reactivex ``on_error_resume_next``; Reactor ``onErrorResume`` + ``concatWith``.
    """
    from rxpipe import on_error_resume_next as resume_sources

    return lambda source: resume_sources(source, second, name=name)
