"""``TestSubscriber``: records what a Flowable delivers and lets a test request on its behalf."""

from __future__ import annotations

import asyncio
from typing import Callable, Generic, TypeVar

from .._protocol import Subscriber, Subscription

__all__ = ["TestSubscriber"]

T = TypeVar("T")


class TestSubscriber(Subscriber[T], Generic[T]):
    """A subscriber for tests: requests only what it is told to, records every signal.

    Args:
        initial_request: items requested in ``on_subscribe`` (0: nothing until ``request``).

    Attributes: ``values`` (items in order), ``error`` (the exception or None), ``completed``,
    ``subscription``, ``subscribe_count``, ``requested`` (total this subscriber asked for).
    It is a user subscriber, so Flowable.subscribe wraps it in the strict boundary: an emission
    beyond its demand shows up as ``error`` = ``MissingBackpressureError``.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, initial_request: int = 0) -> None:
        self.initial_request = initial_request
        self.values: list[T] = []
        self.error: BaseException | None = None
        self.completed = False
        self.subscription: Subscription | None = None
        self.subscribe_count = 0
        self.requested = 0
        self._waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []

    # -- Subscriber ----------------------------------------------------------------------------
    def on_subscribe(self, subscription: Subscription) -> None:
        self.subscribe_count += 1
        self.subscription = subscription
        if self.initial_request:
            self.request(self.initial_request)

    def on_next(self, item: T) -> None:
        self.values.append(item)
        if self._waiters:
            self._check_waiters()

    def on_error(self, error: BaseException) -> None:
        self.error = error
        self._check_waiters()

    def on_complete(self) -> None:
        self.completed = True
        self._check_waiters()

    # -- driving -------------------------------------------------------------------------------
    def request(self, n: int) -> None:
        """``request(n)`` on the subscription (no-op before ``on_subscribe``)."""
        if self.subscription is None:
            raise AssertionError("request() before on_subscribe")
        if type(n) is int and n > 0:
            self.requested += n
        self.subscription.request(n)

    def cancel(self) -> None:
        if self.subscription is not None:
            self.subscription.cancel()

    @property
    def done(self) -> bool:
        """True once a terminal signal arrived."""
        return self.completed or self.error is not None

    # -- waiting -------------------------------------------------------------------------------
    async def await_count(self, n: int, timeout: float = 5.0) -> list[T]:
        """Wait (loop-clock seconds) until ``n`` items arrived or the stream ended; return values.

        Raises AssertionError on timeout, naming what had arrived.
        """
        await self._wait(lambda: len(self.values) >= n or self.done, timeout,
                         f"{n} items")
        return self.values

    async def await_done(self, timeout: float = 5.0) -> None:
        """Wait (loop-clock seconds) for ``on_complete`` or ``on_error``; AssertionError on timeout."""
        await self._wait(lambda: self.done, timeout, "a terminal signal")

    async def _wait(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        if ready():
            return
        future = asyncio.get_running_loop().create_future()
        entry = (ready, future)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise AssertionError(
                f"timed out after {timeout} s waiting for {what}; got values={self.values!r}, "
                f"error={self.error!r}, completed={self.completed}") from None
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)

    def _check_waiters(self) -> None:
        for ready, future in list(self._waiters):
            if not future.done() and ready():
                future.set_result(None)

    def __repr__(self) -> str:
        return (f"<TestSubscriber values={self.values!r} error={self.error!r} "
                f"completed={self.completed}>")
