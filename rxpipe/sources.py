"""Synchronous sources and adapters: from_iterable, range, just, empty, error, defer, from_publisher."""

from __future__ import annotations

import builtins
from typing import Any, Callable, Iterable, TypeVar

from ._demand import EMPTY_SUBSCRIPTION, bad_request, valid_demand
from ._fusion import SyncSource
from ._link import LINK_SLOTS, UpstreamLink
from ._protocol import Publisher, Subscriber, Subscription
from .errors import MissingBackpressureError, ProtocolViolationError
from .flowable import Flowable

__all__ = ["from_iterable", "range", "just", "empty", "error", "defer", "from_publisher"]

T = TypeVar("T")


def from_iterable(iterable: Iterable[T], *, name: str | None = None) -> Flowable[T]:
    """Emit the items of ``iterable``, exactly as many as requested.

    ``iter(iterable)`` is called per subscription: a list or range replays for every subscriber,
    a one-shot iterator serves only the first. Completes without demand once exhausted (at
    subscribe for an empty sized iterable). An exception raised by the iterator is signalled
    with ``on_error``. Items must not be None (§2.13). Synchronous operators after it are fused
    into its loop.
    """
    return SyncSource(iterable, "from_iterable", name)


def range(start: int, stop: int | None = None, step: int = 1, *, name: str | None = None) -> Flowable[int]:  # noqa: A001
    """Emit the integers of ``builtins.range(start, stop, step)`` on demand (``range(n)``: 0..n-1)."""
    r = builtins.range(start) if stop is None else builtins.range(start, stop, step)
    return SyncSource(r, "range", name)


def just(*items: T, name: str | None = None) -> Flowable[T]:
    """Emit the given items on demand, then complete: ``just(1, 2, 3)``."""
    if any(item is None for item in items):
        raise TypeError("just(): items are never None (Reactive Streams §2.13)")
    return SyncSource(items, "just", name)


def empty(*, name: str | None = None) -> Flowable[Any]:
    """Complete immediately after ``on_subscribe``, without any request."""
    return SyncSource((), "empty", name)


class _ErrorFlowable(Flowable[Any]):
    kind = "error"

    def __init__(self, exc: BaseException | Callable[[], BaseException], name: str | None) -> None:
        super().__init__(name=name)
        self.exc = exc

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        exc = self.exc if isinstance(self.exc, BaseException) else self.exc()
        subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
        subscriber.on_error(exc)


def error(exc: BaseException | Callable[[], BaseException], *, name: str | None = None) -> Flowable[Any]:
    """Signal ``on_error(exc)`` right after ``on_subscribe``, without any request.

    ``exc`` may be a factory called per subscription, for a fresh exception (and traceback) each.
    """
    if not isinstance(exc, BaseException) and not callable(exc):
        raise TypeError(f"error() needs an exception or a factory of one, got {exc!r}")
    return _ErrorFlowable(exc, name)


class _DeferFlowable(Flowable[Any]):
    kind = "defer"

    def __init__(self, factory: Callable[..., Any], name: str | None) -> None:
        super().__init__(name=name)
        self.factory = factory
        self.args: tuple[Any, ...] = (None,) if _takes_scheduler(factory) else ()

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        try:
            source = self.factory(*self.args)
            if not isinstance(source, Flowable):
                source = _adapt(source)
        except Exception as exc:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(exc)
            return
        source._subscribe(subscriber)


def _takes_scheduler(factory: Callable[..., Any]) -> bool:
    """reactivex's ``defer(lambda scheduler: ...)``: a factory with one required positional
    parameter gets None (rxpipe has no schedulers; the loop's clock is the time)."""
    import inspect

    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [p for p in params if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(required) == 1


def _adapt(source: Any) -> Flowable[Any]:
    if isinstance(source, Publisher):
        return from_publisher(source)
    if isinstance(source, Iterable):
        return from_iterable(source)
    if hasattr(source, "__await__"):  # a future or coroutine (reactivex's defer takes futures)
        from ._loop_sources import from_future

        return from_future(source)
    raise TypeError(f"defer(): the factory returned {source!r}, not a Flowable, Publisher, iterable or awaitable")


def defer(factory: Callable[..., Flowable[T] | Publisher[T] | Iterable[T]], *,
          name: str | None = None) -> Flowable[T]:
    """Call ``factory()`` for each subscription and subscribe to what it returns.

    The factory may return a Flowable, any Publisher (guarded like :func:`from_publisher`), an
    iterable or an awaitable (one item). A factory with one required parameter is reactivex's
    ``defer(lambda scheduler: ...)`` and is called with None. If it raises, the subscriber gets
    ``on_subscribe`` then ``on_error`` with it. Anchor: reactivex ``defer``, Reactor ``defer``.
    """
    if not callable(factory):
        raise TypeError(f"defer() needs a callable, got {factory!r}")
    return _DeferFlowable(factory, name)


class _PublisherGuard(UpstreamLink, Subscription):
    """Passes signals through unchanged and synchronously, enforcing the rules a foreign
    Publisher may break: §1.1 (beyond demand → MissingBackpressureError, the link's overrun
    rule), §1.7, §1.9, §2.5, §2.13 (None → TypeError) and §3.9 (``request(n <= 0)`` →
    ValueError, even if the publisher would ignore it). ``upstream_done`` is the terminal flag."""

    __slots__ = (*LINK_SLOTS, "downstream", "in_next", "deferred")

    def __init__(self, downstream: Subscriber[Any]) -> None:
        self.downstream = downstream
        self.in_next = False
        self.deferred: BaseException | None = None
        self.link_upstream(None)

    def _violation(self, error: BaseException) -> None:
        linked = self.upstream is not None
        self.cancel_upstream()
        if not linked:
            self.downstream.on_subscribe(EMPTY_SUBSCRIPTION)
        self.downstream.on_error(error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self.downstream.on_error(error)  # upstream is already cancelled

    def on_next(self, item: Any) -> None:
        if self.upstream_done:
            return
        if self.upstream is None:
            self._violation(ProtocolViolationError("Reactive Streams §1.9: on_next before on_subscribe"))
            return
        if item is None:
            self._violation(TypeError("Reactive Streams §2.13: the publisher emitted None"))
            return
        if not self.accept(item):
            return
        self.in_next = True
        try:
            self.downstream.on_next(item)
        finally:
            self.in_next = False
        if self.deferred is not None:  # a §3.9 request made inside on_next (upstream cancelled)
            error, self.deferred = self.deferred, None
            self.downstream.on_error(error)

    def _upstream_finished(self, error: BaseException | None) -> None:
        if self.upstream is None:  # terminal before on_subscribe (§1.9): give downstream one
            self.downstream.on_subscribe(EMPTY_SUBSCRIPTION)
        if error is not None:
            self.downstream.on_error(error)
        else:
            self.downstream.on_complete()

    def request(self, n: int) -> None:
        if self.upstream_done or self.upstream is None:
            return
        if not valid_demand(n):
            self.cancel_upstream()
            if self.in_next:
                self.deferred = bad_request(n)  # delivered once on_next returns (§1.3)
            else:
                self.downstream.on_error(bad_request(n))
            return
        self.request_upstream(n)

    def cancel(self) -> None:
        self.deferred = None  # a cancel withdraws a pending §3.9 error too
        self.cancel_upstream()


class _PublisherFlowable(Flowable[Any]):
    kind = "from_publisher"

    def __init__(self, publisher: Publisher[Any], name: str | None) -> None:
        super().__init__(name=name)
        self.publisher = publisher

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        guard = _PublisherGuard(subscriber)
        try:
            self.publisher.subscribe(guard)
        except Exception as exc:
            guard._violation(exc)  # before on_subscribe, the subscriber gets an empty one first


def from_publisher(publisher: Publisher[T], *, name: str | None = None) -> Flowable[T]:
    """Adapt any Reactive Streams Publisher: ``request(n)``/``cancel`` are forwarded unchanged and
    synchronously (no prefetch). Rule violations become errors: emitting beyond demand signals
    ``MissingBackpressureError`` and cancels the publisher (§1.1); ``None`` items ``TypeError``.
    A Flowable is returned as is.
    """
    if isinstance(publisher, Flowable):
        return publisher
    if not isinstance(publisher, Publisher):
        raise TypeError(f"from_publisher() needs a Publisher, got {publisher!r}")
    return _PublisherFlowable(publisher, name)
