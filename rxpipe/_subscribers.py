"""Terminal subscribers: the strict boundary around user subscribers, and callback subscribers."""

from __future__ import annotations

from typing import Any, Callable

from ._demand import InternalSubscriber, log, valid_demand
from ._link import LINK_SLOTS, UpstreamLink
from ._protocol import UNBOUNDED, Subscriber, Subscription
from .errors import MissingBackpressureError

__all__ = ["StrictSubscriber", "LambdaSubscriber"]


class StrictSubscriber(UpstreamLink, Subscription):
    """Wraps a user's :class:`~rxpipe.Subscriber` so it gets every Reactive Streams guarantee.

    - §1.1: an ``on_next`` beyond the total requested cancels upstream and signals
      ``MissingBackpressureError`` instead of delivering the item.
    - §1.7: nothing after a terminal signal or after the user cancelled.
    - §2.5: a second ``on_subscribe`` is cancelled.
    - §2.13: if the user's ``on_next`` raises, the subscription is cancelled and the error logged
      (with traceback) on the ``rxpipe`` logger; ``on_error``/``on_complete`` raising is logged.

    The user sees this object as its :class:`~rxpipe.Subscription`.
    """

    __slots__ = (*LINK_SLOTS, "actual")

    def __init__(self, actual: Subscriber[Any]) -> None:
        self.actual = actual
        self.link_upstream(None)

    @property
    def done(self) -> bool:
        """True after a terminal signal, a cancel or a protocol violation."""
        return self.upstream_done

    def on_subscribe(self, subscription: Subscription) -> None:
        if self.upstream is not None:
            subscription.cancel()
            log.warning("Reactive Streams §2.5: %r subscribed twice; second subscription cancelled",
                        self.actual)
            return
        if self.upstream_done:
            subscription.cancel()
            return
        self.upstream = subscription
        try:
            self.actual.on_subscribe(self)
        except Exception:
            log.exception("%r.on_subscribe raised; subscription cancelled", self.actual)
            self.cancel()

    def request(self, n: int) -> None:
        if self.upstream_done or self.upstream is None:
            return
        if valid_demand(n):
            self.request_upstream(n)
        else:
            self.upstream.request(n)  # an invalid n makes upstream signal §3.9's ValueError

    def cancel(self) -> None:
        self.cancel_upstream()

    def on_next(self, item: Any) -> None:
        if not self.accept(item):  # late (ignored) or beyond demand (§1.1: the link's overrun rule)
            return
        try:
            self.actual.on_next(item)
        except Exception:
            log.exception("%r.on_next raised; subscription cancelled (Reactive Streams §2.13)",
                          self.actual)
            self.cancel()

    def _upstream_overrun(self, error: MissingBackpressureError) -> None:
        self._deliver_error(error)

    def _upstream_finished(self, error: BaseException | None) -> None:
        if error is not None:
            self._deliver_error(error)
            return
        try:
            self.actual.on_complete()
        except Exception:
            log.exception("%r.on_complete raised", self.actual)

    def _deliver_error(self, error: BaseException) -> None:
        try:
            self.actual.on_error(error)
        except Exception:
            log.exception("%r.on_error raised while handling %r", self.actual, error)


def _log_unhandled(error: BaseException) -> None:
    log.error("unhandled error in subscribe(on_next=...) without on_error",
              exc_info=(type(error), error, error.__traceback__))


class LambdaSubscriber(InternalSubscriber):
    """``flowable.subscribe(on_next=, on_error=, on_complete=)``: requests ``UNBOUNDED``.

    Returned to the caller as a handle: ``cancel()`` (alias ``dispose()``) stops the stream.
    If ``on_next`` raises, the subscription is cancelled and the exception goes to ``on_error``
    (or is logged when there is none). Without ``on_error``, errors are logged on ``rxpipe``.
    """

    __slots__ = ("_on_next", "_on_error", "_on_complete", "subscription", "done")

    def __init__(self, on_next: Callable[[Any], Any] | None = None,
                 on_error: Callable[[BaseException], Any] | None = None,
                 on_complete: Callable[[], Any] | None = None) -> None:
        self._on_next = on_next
        self._on_error = on_error
        self._on_complete = on_complete
        self.subscription: Subscription | None = None
        self.done = False

    def on_subscribe(self, subscription: Subscription) -> None:
        if self.subscription is not None:
            subscription.cancel()
            return
        self.subscription = subscription
        subscription.request(UNBOUNDED)

    def on_next(self, item: Any) -> None:
        fn = self._on_next
        if fn is None or self.done:
            return
        try:
            fn(item)
        except Exception as error:
            self.cancel()
            self._signal_error(error)

    def on_error(self, error: BaseException) -> None:
        if self.done:
            return
        self.done = True
        self._signal_error(error)

    def _signal_error(self, error: BaseException) -> None:
        handler = self._on_error or _log_unhandled
        try:
            handler(error)
        except Exception:
            log.exception("on_error callback raised while handling %r", error)

    def on_complete(self) -> None:
        if self.done:
            return
        self.done = True
        if self._on_complete is not None:
            try:
                self._on_complete()
            except Exception:
                log.exception("on_complete callback raised")

    def cancel(self) -> None:
        """Stop receiving items and cancel upstream (idempotent)."""
        if self.done:
            return
        self.done = True
        if self.subscription is not None:
            self.subscription.cancel()

    dispose = cancel
