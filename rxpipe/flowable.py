"""``Flowable``: a Publisher with operators (``pipe``), callbacks, ``to_list`` and ``async for``."""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from collections import deque
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Generic, TypeVar, overload

from ._capabilities import NO_CAPABILITIES, Capabilities
from ._demand import EMPTY_SUBSCRIPTION, InternalSubscriber
from ._link import LINK_SLOTS, UpstreamLink
from ._protocol import UNBOUNDED, Publisher, Subscriber, Subscription
from ._subscribers import LambdaSubscriber, StrictSubscriber
from .errors import MissingBackpressureError

if TYPE_CHECKING:
    import reactivex

__all__ = ["Flowable", "Operator", "DEFAULT_PREFETCH", "pipe"]

T = TypeVar("T")
R = TypeVar("R")

#: Prefetch of ``async for``, ``from_async_iterable`` and boundaries without an explicit size.
DEFAULT_PREFETCH = 256

Operator = Callable[["Flowable[Any]"], "Flowable[Any]"]


class Flowable(Publisher[T], Generic[T]):
    """A cold publisher of ``T`` with Reactive Streams ``request(n)`` demand.

    Every ``subscribe`` starts an independent run (§1.11). Operators are functions
    ``Flowable -> Flowable`` applied with :meth:`pipe`. A Flowable is also a stage of a pipeline:
    ``kind`` names the operator or source, ``name`` the stage (``<kind>_<index>`` unless named;
    used as the ``stage`` label of metrics), ``index`` its position (sources are 0) and
    ``upstreams`` the stages feeding it.
    """

    kind = "flowable"
    #: True for a stage whose items are its first upstream's items, passed along (tap, filter,
    #: buffer, timeout, ...): it shows that upstream's :attr:`capabilities`.
    passes_capabilities = False

    def __init__(self, *, name: str | None = None, upstreams: tuple[Flowable[Any], ...] = ()) -> None:
        self.upstreams = upstreams
        self.index: int = 1 + max((u.index for u in upstreams), default=-1)
        self.name = name or f"{self.kind}_{self.index}"

    @property
    def capabilities(self) -> Capabilities:
        """What this stage declares about its items (e.g. "batches of at most N"); a
        pass-through stage shows its upstream's, through any number of pass-through stages."""
        if self.passes_capabilities and self.upstreams:
            return self.upstreams[0].capabilities
        return NO_CAPABILITIES

    # -- subscribing ---------------------------------------------------------------------------
    @overload
    def subscribe(self, subscriber: Subscriber[T]) -> None: ...

    @overload
    def subscribe(self, on_next: Callable[[T], Any] | None = None,
                  on_error: Callable[[BaseException], Any] | None = None,
                  on_complete: Callable[[], Any] | None = None, *,
                  on_completed: Callable[[], Any] | None = None) -> LambdaSubscriber: ...

    def subscribe(self, subscriber: Any = None, on_error: Any = None, on_complete: Any = None, *,  # type: ignore[misc]
                  on_next: Callable[[T], Any] | None = None,
                  on_completed: Callable[[], Any] | None = None) -> LambdaSubscriber | None:
        """Subscribe a :class:`~rxpipe.Subscriber`, or callbacks.

        ``subscribe(subscriber)``: the subscriber requests what it wants; it is wrapped in the
        strict boundary that enforces every Reactive Streams rule on its behalf. Returns None.

        ``subscribe(on_next=, on_error=, on_complete=)`` (positionally too, like reactivex;
        ``on_completed=`` is reactivex's name for ``on_complete``, and a reactivex observer —
        ``on_next``/``on_error``/``on_completed`` methods — is taken as reactivex takes it):
        requests ``UNBOUNDED``; returns a handle whose ``cancel()`` (``dispose()``) stops it.
        Without ``on_error``, an error is logged on the ``rxpipe`` logger.
        """
        if on_completed is not None:
            if on_complete is not None:
                raise TypeError("subscribe() got on_completed= and on_complete=, two names of one argument")
            on_complete = on_completed
        if (subscriber is not None and not callable(subscriber) and not isinstance(subscriber, Subscriber)
                and callable(getattr(subscriber, "on_next", None))
                and callable(getattr(subscriber, "on_completed", None))):
            if on_error is not None or on_complete is not None or on_next is not None:
                raise TypeError("subscribe(observer) takes no callbacks")
            observer = subscriber  # a reactivex Observer
            subscriber, on_complete = observer.on_next, observer.on_completed
            on_error = getattr(observer, "on_error", None)
        if subscriber is not None and not callable(subscriber):
            if not isinstance(subscriber, Subscriber):
                raise TypeError(f"subscribe() needs a Subscriber or callables, got {subscriber!r}")
            if on_error is not None or on_complete is not None or on_next is not None:
                raise TypeError("subscribe(subscriber) takes no callbacks")
            if not getattr(subscriber, "_rx_internal", False):
                subscriber = StrictSubscriber(subscriber)
            self._subscribe_safely(subscriber)
            return None
        if subscriber is not None and on_next is not None:
            raise TypeError("on_next given twice")
        handle = LambdaSubscriber(on_next or subscriber, on_error, on_complete)
        self._subscribe_safely(handle)
        return handle

    def _subscribe_safely(self, subscriber: Subscriber[T]) -> None:
        """Call :meth:`_subscribe`; an exception before ``on_subscribe`` becomes ``on_error``."""
        guard = _FirstSignal(subscriber)
        try:
            self._subscribe(guard)  # type: ignore[arg-type]  # duck-typed Subscriber
        except Exception as error:
            if guard.subscribed:
                raise
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(error)

    @abstractmethod
    def _subscribe(self, subscriber: Subscriber[T]) -> None:
        """Start one run for a trusted subscriber (internal; operators call this upstream)."""

    # -- composing -----------------------------------------------------------------------------
    def pipe(self, *operators: Operator) -> Flowable[Any]:
        """Apply operators left to right: ``f.pipe(a, b)`` is ``b(a(f))``.

        Each operator returns a Flowable, except that the last one may be a *terminal* operator
        (an attribute ``terminal = True``, as ``ops.to_future()``): its result, e.g. a future,
        is returned as is. TypeError for anything else that is not a Flowable."""
        source: Flowable[Any] = self
        last = len(operators) - 1
        for k, op in enumerate(operators):
            result = op(source)
            if not isinstance(result, Flowable):
                if k == last and getattr(op, "terminal", False):
                    return result  # type: ignore[no-any-return]
                raise TypeError(f"operator {op!r} returned {result!r}, not a Flowable")
            source = result
        return source

    # -- consuming -----------------------------------------------------------------------------
    async def to_list(self) -> list[T]:
        """Request ``UNBOUNDED`` and return every item once the stream completes.

        Raises the stream's error. Cancelling the awaiting task cancels the subscription.
        """
        collector = _ListCollector(asyncio.get_running_loop().create_future())
        self._subscribe_safely(collector)
        try:
            return await collector.future
        except asyncio.CancelledError:
            collector.cancel()
            raise

    def __aiter__(self) -> AsyncIterator[T]:
        """``async for x in flowable``: prefetch 256 with the §2 replenish rule.

        Leaving the loop (``break``, an exception, ``aclose()``) cancels upstream at once.
        """
        return FlowableIterator(self, DEFAULT_PREFETCH)

    def iterate(self, prefetch: int = DEFAULT_PREFETCH, *, credit: bool = False) -> FlowableIterator[T]:
        """An async iterator with an explicit window.

        ``credit=False``: requests ``prefetch`` at once, then replenishes by the §2 rule as items
        are taken (what ``async for`` does). ``credit=True``: requests ``prefetch`` (the credit
        window, items) and nothing more until the consumer calls ``grant(n)`` — e.g. after an item
        was actually written to a slow socket, so upstream never runs ahead of the writer.
        """
        return FlowableIterator(self, prefetch, credit=credit)

    def to_observable(self) -> reactivex.Observable[T]:
        """A reactivex Observable that subscribes to this Flowable with ``UNBOUNDED`` demand.

        Where pull becomes push: the observer receives every item as fast as the Flowable
        produces it. Disposing the reactivex subscription cancels the Flowable's.
        """
        from .interop import to_observable

        return to_observable(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def pipe(*operators: Operator) -> Operator:
    """Compose operators into one: ``rx.pipe(a, b)(f) == f.pipe(a, b)``."""

    def composed(source: Flowable[Any]) -> Flowable[Any]:
        return source.pipe(*operators)

    return composed


class _FirstSignal:
    """Forwards every signal; remembers whether ``on_subscribe`` happened (for error routing).

    Stays off the hot path: its ``on_next``/``on_error``/``on_complete`` are the downstream
    subscriber's own bound methods, so the publisher calls them directly.
    """

    __slots__ = ("actual", "subscribed", "on_next", "on_error", "on_complete")
    _rx_internal = True

    def __init__(self, actual: Subscriber[Any]) -> None:
        self.actual = actual
        self.subscribed = False
        self.on_next = actual.on_next
        self.on_error = actual.on_error
        self.on_complete = actual.on_complete

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscribed = True
        self.actual.on_subscribe(subscription)


class _ListCollector(InternalSubscriber):
    __slots__ = ("future", "items", "subscription")

    def __init__(self, future: asyncio.Future[list[Any]]) -> None:
        self.future = future
        self.items: list[Any] = []
        self.subscription: Subscription | None = None

    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscription = subscription
        subscription.request(UNBOUNDED)

    def on_next(self, item: Any) -> None:
        self.items.append(item)

    def on_error(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)

    def on_complete(self) -> None:
        if not self.future.done():
            self.future.set_result(self.items)

    def cancel(self) -> None:
        if self.subscription is not None:
            self.subscription.cancel()


class _IteratorSubscriber(UpstreamLink):
    """Receives into a queue for :class:`FlowableIterator`; never references the iterator.

    Its link (prefetch and replenish rule, overrun, cancel-once) is :class:`UpstreamLink`'s.
    """

    __slots__ = (*LINK_SLOTS, "queue", "finished", "error", "waiter", "__weakref__")
    hands_itself_downstream = False

    def __init__(self, prefetch: int) -> None:
        self.queue: deque[Any] = deque()
        self.finished = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.link_upstream(None, prefetch)

    @property
    def subscription(self) -> Subscription | None:
        return self.upstream

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def on_next(self, item: Any) -> None:
        if self.accept(item):
            self.queue.append(item)
            if self.waiter is not None:
                self._wake()

    def _upstream_finished(self, error: BaseException | None) -> None:
        self._end(error)

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self._end(error)  # after the items received before it

    def _end(self, error: BaseException | None) -> None:
        self.error = error
        self.finished = True
        self._wake()


class FlowableIterator(AsyncIterator[T]):
    """The async iterator behind ``async for``; cancels its subscription when left or collected.

    With ``credit=True`` it replenishes only through :meth:`grant`.
    """

    __slots__ = ("_receiver", "_closed", "_credit", "_loop")

    def __init__(self, source: Flowable[T], prefetch: int, *, credit: bool = False) -> None:
        self._closed = False
        #: the loop of the first wait (asyncio.get_running_loop() is a getpid() syscall per call
        #: on Python < 3.12: not once per item)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._credit = credit
        self._receiver = _IteratorSubscriber(prefetch)
        source._subscribe_safely(self._receiver)

    def grant(self, n: int = 1) -> None:
        """Give upstream ``n`` more items of credit (``credit=True`` iterators)."""
        if not self._closed:
            self._receiver.request_upstream(n)

    def __aiter__(self) -> FlowableIterator[T]:
        return self

    async def __anext__(self) -> T:
        receiver = self._receiver
        queue = receiver.queue
        while not queue:
            # inline, not self._wait(): no coroutine frame per item on the hot path
            if receiver.finished or self._closed:
                self._closed = True
                if receiver.error is not None:
                    raise receiver.error
                raise StopAsyncIteration
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            waiter = receiver.waiter = loop.create_future()
            try:
                await waiter
            except asyncio.CancelledError:
                # A cancelled __anext__ (e.g. asyncio.wait_for timing out) is not leaving the
                # loop: the subscription and what was received stay for the next __anext__.
                # Leaving cancels upstream through aclose() or when the iterator is collected.
                if receiver.waiter is waiter:
                    receiver.waiter = None
                raise
        item = queue.popleft()
        if not self._credit:
            receiver.replenish(1)
        return item

    async def next_window(self) -> list[T]:
        """Wait for at least one item, then take every item received so far, in order.

        One wake for a whole ready window instead of one per item: a consumer that writes
        what it takes (an SSE stream) makes one write per window. What was taken never exceeds
        what was requested of upstream (the window is the queue, and the queue holds only what
        upstream delivered within demand). ``credit=True``: grant what was taken once it is
        handled; otherwise the §2 replenish rule counts every item taken. Raises
        ``StopAsyncIteration`` at the end, or the stream's error once the items before it were
        taken (as ``__anext__`` does)."""
        receiver = self._receiver
        queue = receiver.queue
        while not queue:
            await self._wait(receiver)
        window = list(queue)
        queue.clear()
        if not self._credit:
            receiver.replenish(len(window))
        return window

    async def _wait(self, receiver: _IteratorSubscriber) -> None:
        """Wait for the next signal while the queue is empty (one future per wait, none while
        items are queued); raise the end of the stream."""
        if receiver.finished or self._closed:
            self._closed = True
            if receiver.error is not None:
                raise receiver.error
            raise StopAsyncIteration
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        waiter = receiver.waiter = loop.create_future()
        try:
            await waiter
        except asyncio.CancelledError:
            # as in __anext__: a cancelled wait is not leaving the stream
            if receiver.waiter is waiter:
                receiver.waiter = None
            raise

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            receiver = self._receiver
            receiver.cancel_upstream()
            receiver.queue.clear()

    async def aclose(self) -> None:
        """Cancel upstream; the iterator then ends."""
        self._close()

    def __del__(self) -> None:
        self._close()

