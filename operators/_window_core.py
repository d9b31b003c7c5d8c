"""What every window operator shares (DESIGN §3, third round): a window is a Flowable whose own
subscriber's demand governs what flows into it, and the upstream is cancelled only once every
window is disposed (Reactor ``FluxWindow``).

- :class:`Window` / :class:`WindowSubscription`: one window, unicast; its items queue until its
  subscriber asks for them (a second subscriber gets ``ProtocolViolationError``). Each item it
  delivers (or drops, when it is cancelled) gives its credit back to the stage.
- :class:`WindowStage`: the :class:`rxpipe.stage.Stage` base of the window operators. Its
  ``held`` items are the items queued in its windows (a copy per window it went to), and they
  bound the upstream's window strictly (``held_bounds_credit``): upstream outstanding + held +
  windows waiting for the main stream's demand <= ``prefetch`` (default 256). A window nobody
  consumes holds that credit and pauses the others, as in Reactor: subscribe to every window
  as it comes, or cancel it.
- :class:`WindowsFlowable` and :class:`MainGuard`: the main stream's cancel does not reach the
  stage while windows are open: the guard tells the stage (``main_cancelled``), which opens no
  new window and completes, cancelling the upstream, once the last open window is disposed or
  closed. Windows the main stream had not delivered yet are disposed.
"""

from __future__ import annotations

from typing import Any, Callable

from rxpipe import UNBOUNDED, Flowable, Subscriber, Subscription
from rxpipe.errors import ProtocolViolationError
from rxpipe.flowable import DEFAULT_PREFETCH
from rxpipe.stage import EMPTY_SUBSCRIPTION, QueueDrainSubscription, Stage

__all__ = ["Window", "WindowSubscription", "WindowStage", "WindowsFlowable", "MainGuard", "Control"]


class Control:
    """Shared by one subscription's :class:`MainGuard` and its stage (``logic``)."""

    __slots__ = ("logic",)

    def __init__(self) -> None:
        self.logic: WindowStage | None = None


class Window(Flowable[Any]):
    """One window emitted by a window operator: a Flowable of the items that fell into it.

    Unicast: one subscriber; a second one gets ``on_error(ProtocolViolationError)``. Items that
    arrive before it is subscribed wait in the window (within the stage's credit). ``key``: the
    group's key (``group_by_until``), else None.
    """

    kind = "window"

    def __init__(self, subscription: WindowSubscription, key: Any = None) -> None:
        super().__init__(name=subscription.stage.stage_name)
        self.key = key
        self.subscription = subscription

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.subscription.attach(subscriber)

    def dispose(self) -> None:
        """Give the window up before subscribing (its items are dropped, their credit returned)."""
        self.subscription.cancel()

    def __repr__(self) -> str:
        return f"<Window {self.name}{'' if self.key is None else f' key={self.key!r}'}>"


class WindowSubscription(QueueDrainSubscription):
    """A window's queue and, once subscribed, its link to the window's subscriber."""

    __slots__ = ("stage", "subscribed", "closed", "flowable")

    def __init__(self, stage: WindowStage) -> None:
        super().__init__(None)  # type: ignore[arg-type]  # the subscriber comes with attach()
        self.stage = stage
        self.flowable: Window | None = None  # the Window the main stream got
        self.subscribed = False
        self.closed = False  # the stage closed it: its terminal signal follows the queued items

    def attach(self, subscriber: Subscriber[Any]) -> None:
        if self.subscribed:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(ProtocolViolationError(
                f"a window of stage {self.stage.stage_name!r} already has a subscriber (a window is unicast)"))
            return
        self.subscribed = True
        self.downstream = subscriber
        subscriber.on_subscribe(self)
        self.drain()

    def push(self, item: Any) -> None:
        self.queue.append(item)
        if self.subscribed:
            self.drain()

    def terminate(self, error: BaseException | None) -> None:
        self.closed = True
        self.error = error
        self.finished = True
        if self.subscribed:
            self.drain()

    def _on_delivered(self, count: int) -> None:
        self.stage.invoke(self.stage.released, count)

    def _release(self) -> None:
        # cancelled (its queued items are dropped) or terminated (its queue is empty by then)
        dropped = len(self.queue)
        self.queue.clear()
        self.stage.invoke(self.stage.window_gone, self, dropped)


class WindowStage(Stage):
    """The base of the window operators (see the module doc).

    Subclasses call :meth:`open_window` (emits a new :class:`Window`; None once the main stream
    is cancelled), :meth:`push`, :meth:`close_window`, and :meth:`close_all` at the end.
    State: ``windows`` (the open ones, oldest first), ``cancelled_main``.
    """

    held_bounds_credit = True  # held = items queued in windows: their subscribers release them
    log_hook_errors = False  # the mappers are the user's

    def __init__(self, control: Control, prefetch: int = DEFAULT_PREFETCH) -> None:
        control.logic = self
        self.prefetch = prefetch  # type: ignore[misc]
        self.max_held = max(Stage.max_held, prefetch)  # type: ignore[misc]
        self.windows: list[WindowSubscription] = []
        self.cancelled_main = False
        self.held = 0

    def open_window(self, key: Any = None) -> WindowSubscription | None:
        if self.cancelled_main:
            return None
        subscription = WindowSubscription(self)
        subscription.flowable = Window(subscription, key)
        self.windows.append(subscription)
        self.emit(self.wrap(subscription.flowable, key))
        return subscription

    def wrap(self, window: Window, key: Any) -> Any:
        """What the main stream gets for a new window: the window itself (``group_join``: a pair)."""
        return window

    def push(self, window: WindowSubscription | None, item: Any) -> None:
        if window is not None and not window.cancelled and not window.closed:
            self.held += 1
            window.push(item)

    def close_window(self, window: WindowSubscription | None, error: BaseException | None = None) -> None:
        if window is None or window.closed:
            return
        if window in self.windows:
            self.windows.remove(window)
        window.terminate(error)
        self.maybe_done()

    def close_all(self, error: BaseException | None = None) -> None:
        for window in list(self.windows):
            self.close_window(window, error)

    # -- called back by the windows and the guard (through invoke: serially, as hooks) ------------
    def released(self, count: int) -> None:
        self.held -= count

    def window_gone(self, window: WindowSubscription, dropped: int) -> None:
        self.held -= dropped
        if window in self.windows:
            self.windows.remove(window)
        self.maybe_done()

    def main_cancelled(self) -> None:
        self.cancelled_main = True
        self.maybe_done()

    def maybe_done(self) -> None:
        """The main stream was cancelled and no window is left: end (the upstream is cancelled)."""
        if self.cancelled_main and not self.windows:
            self.complete()

    # -- the usual ends: every open window gets the signal ------------------------------------------
    def on_complete(self) -> None:
        self.close_all()
        self.complete()

    def on_error(self, error: BaseException) -> None:
        self.close_all(error)
        self.fail(error)

    def on_input_error(self, input: Any, error: BaseException) -> None:
        self.close_all(error)
        self.fail(error)

    def on_stop(self) -> None:
        # ended another way (a stage failure the kit signalled): the windows must end too
        for window in self.windows:
            if not window.closed:
                window.terminate(RuntimeError(f"stage {self.stage_name!r} ended before this window closed"))
        self.windows = []


class MainGuard(Subscriber[Any], Subscription):
    """Between a window stage and the main stream's subscriber: a cancel of the main stream
    becomes the stage's ``main_cancelled`` (the upstream lives on while windows are open), and
    the windows the main stream had not taken yet are disposed."""

    __slots__ = ("downstream", "control", "upstream", "cancelled")
    _rx_internal = True

    def __init__(self, downstream: Subscriber[Any], control: Control) -> None:
        self.downstream = downstream
        self.control = control
        self.upstream: Subscription | None = None
        self.cancelled = False

    def on_subscribe(self, subscription: Subscription) -> None:
        self.upstream = subscription
        self.downstream.on_subscribe(self)

    def on_next(self, item: Any) -> None:
        if self.cancelled:
            if isinstance(item, Window):
                item.dispose()
            return
        self.downstream.on_next(item)

    def on_error(self, error: BaseException) -> None:
        if not self.cancelled:
            self.downstream.on_error(error)

    def on_complete(self) -> None:
        if not self.cancelled:
            self.downstream.on_complete()

    def request(self, n: int) -> None:
        if not self.cancelled and self.upstream is not None:
            self.upstream.request(n)

    def cancel(self) -> None:
        if self.cancelled or self.upstream is None:
            return
        self.cancelled = True
        logic = self.control.logic
        if logic is None or not logic.invoke(logic.main_cancelled):
            self.upstream.cancel()
        else:
            self.upstream.request(UNBOUNDED)  # the windows still queued come out: disposed above


class WindowsFlowable(Flowable[Any]):
    """The node of a window operator: each subscription runs ``factory(control, *args)`` (an
    ``operator()`` factory of a :class:`WindowStage`) over ``source`` behind a :class:`MainGuard`."""

    def __init__(self, source: Flowable[Any], factory: Callable[..., Any], args: tuple[Any, ...], kind: str,
                 name: str | None, inputs: tuple[Flowable[Any], ...] = ()) -> None:
        self.kind = kind
        super().__init__(name=name, upstreams=(source, *inputs))
        self.source = source
        self.factory = factory
        self.args = args

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        control = Control()
        flow = self.factory(control, *self.args, name=self.name)(self.source)
        flow._subscribe(MainGuard(subscriber, control))
