"""One-to-one stages of the third round: ``map_indexed``, ``filter_indexed``, ``finally_action``,
``materialize``, ``dematerialize`` (DESIGN §3, "Operators, third round").

Written on :class:`rxpipe.stage.Stage`, demand-driven (``prefetch = None``): a ``request(n)``
reaches upstream as is, and an item that emits nothing (a filter's drop) frees its credit at
once, so the kit asks upstream for one more; ``finally_action`` is a plain pass-through (its
action must run after the terminal signal is delivered). The stateless ones (``pluck``, ``starmap``,
``do_action`` …) are the fused ``map`` / ``tap`` and live in the manual, ``_transforming.py``.

``materialize`` emits reactivex's own notification objects (``reactivex.notification.OnNext``,
``OnError``, ``OnCompleted``), so they compare equal to reactivex's, and ``dematerialize`` takes
them back (anything with reactivex's ``kind`` of "N", "E" or "C").
"""

from __future__ import annotations

import logging
from typing import Any, Callable

from rxpipe import Flowable, Subscriber, Subscription
from rxpipe.stage import Stage, operator

__all__ = ["map_indexed_stage", "filter_indexed_stage", "FinallyFlowable", "materialize_stage",
           "dematerialize_stage"]

log = logging.getLogger("rxpipe")


class MapIndexed(Stage):
    """``mapper(item, index)`` for every item, index from 0 (per subscription)."""

    log_hook_errors = False  # a user function's error is the stream's (as map's)
    prefetch = None
    kind = "map_indexed"

    def __init__(self, mapper: Callable[[Any, int], Any]) -> None:
        self.mapper = mapper
        self.index = 0

    def on_next(self, item: Any) -> None:
        index = self.index
        self.index = index + 1
        self.emit(self.mapper(item, index))  # None: emit's TypeError (§2.13)


class FilterIndexed(Stage):
    """The items for which ``predicate(item, index)`` holds."""

    log_hook_errors = False
    prefetch = None
    passes_capabilities = True
    kind = "filter_indexed"

    def __init__(self, predicate: Callable[[Any, int], Any] | None) -> None:
        self.predicate = predicate
        self.index = 0

    def on_next(self, item: Any) -> None:
        predicate = self.predicate
        if predicate is None:
            self.emit(item)
            return
        index = self.index
        keep = predicate(item, index)
        self.index = index + 1  # reactivex counts an item once its predicate returned
        if keep:
            self.emit(item)


class FinallyFlowable(Flowable[Any]):
    """``finally_action``'s node: each subscription is a :class:`FinallySubscription`."""

    kind = "finally_action"
    passes_capabilities = True

    def __init__(self, source: Flowable[Any], action: Callable[[], Any], name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        self.action = action

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.source._subscribe(FinallySubscription(subscriber, self.action, self.name))


class FinallySubscription(Subscriber[Any], Subscription):
    """Every signal passed through unchanged, both ways; ``action()`` once, *after* the terminal
    signal went downstream or after the cancel went upstream (reactivex disposes, and so runs the
    action, right after the terminal signal; a ``Stage``'s ``on_stop`` runs before it is
    delivered, hence this small pass-through instead). The rules (§1.1, §3.9 …) are enforced by
    the stages on either side: nothing is queued or counted here."""

    __slots__ = ("downstream", "upstream", "action", "name")
    _rx_internal = True

    def __init__(self, downstream: Subscriber[Any], action: Callable[[], Any] | None, name: str) -> None:
        self.downstream = downstream
        self.upstream: Subscription | None = None
        self.action = action
        self.name = name

    def _run(self) -> None:
        action, self.action = self.action, None
        if action is not None:
            try:
                action()
            except Exception as error:  # the stream has ended: nothing downstream can hear of it
                log.error("stage %r: finally_action's action raised %r", self.name, error, exc_info=error)

    def on_subscribe(self, subscription: Subscription) -> None:
        self.upstream = subscription
        self.downstream.on_subscribe(self)

    def on_next(self, item: Any) -> None:
        self.downstream.on_next(item)

    def on_error(self, error: BaseException) -> None:
        self.downstream.on_error(error)
        self._run()

    def on_complete(self) -> None:
        self.downstream.on_complete()
        self._run()

    def request(self, n: int) -> None:
        if self.upstream is not None:
            self.upstream.request(n)

    def cancel(self) -> None:
        if self.upstream is not None:
            self.upstream.cancel()
        self._run()


class Materialize(Stage):
    """Every signal as an item: ``OnNext(value)``, then ``OnCompleted()`` or ``OnError(error)``,
    then completion."""

    prefetch = None
    kind = "materialize"

    def __init__(self) -> None:
        from reactivex.notification import OnCompleted, OnError, OnNext

        self.on_next_type, self.on_error_type, self.on_completed_type = OnNext, OnError, OnCompleted

    def on_next(self, item: Any) -> None:
        self.emit(self.on_next_type(item))

    def on_complete(self) -> None:
        self.emit(self.on_completed_type())  # waits for demand, then the completion follows it
        self.complete()

    def on_error(self, error: BaseException) -> None:
        self.emit(self.on_error_type(error))  # type: ignore[arg-type]  # any BaseException
        self.complete()


class Dematerialize(Stage):
    """Notifications back into signals: ``OnNext(v)`` → ``v``, ``OnError(e)`` → ``on_error(e)``,
    ``OnCompleted()`` → completion (upstream cancelled)."""

    prefetch = None
    kind = "dematerialize"

    def on_next(self, item: Any) -> None:
        kind = getattr(item, "kind", None)
        if kind == "N":
            self.emit(item.value)
        elif kind == "E":
            self.fail(item.exception)
        elif kind == "C":
            self.complete()
        else:
            self.fail(TypeError(f"stage {self.stage_name!r}: dematerialize() takes notifications (reactivex's "
                                f"OnNext, OnError, OnCompleted, as materialize() emits), got {item!r}"))


#: The operators (``rxpipe.operators`` checks the arguments and documents them).
map_indexed_stage = operator(MapIndexed)
filter_indexed_stage = operator(FilterIndexed)
materialize_stage = operator(Materialize)
dematerialize_stage = operator(Dematerialize)
