"""The handler class a user writes an operator with: :class:`Stage` (DESIGN §3, second round).

A :class:`Stage` is the logic of one subscription of an operator, in the style of Akka's
``GraphStageLogic``: hooks the kit calls (``on_next``, ``on_complete``, ``on_error``,
``on_cancel``, ``on_timer``, ...) and actions the hooks call (``emit``, ``complete``, ``fail``,
``start_timer``, ...). The kit (``rxpipe._stage_run``) owns everything else: upstream credit,
the output queue, termination order, timers, exceptions and statistics. This module holds only
the user-facing half; every action forwards to the kit object in ``_kit``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Hashable

if TYPE_CHECKING:
    from ._stage_run import Input, StageRun
    from .flowable import Flowable

__all__ = ["Stage", "NOTHING"]


class _Nothing:
    """The type of :data:`Stage.NOTHING`: "no value yet" where None cannot serve (items are
    never None, but a key mapper may return None)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Stage.NOTHING"

    def __reduce__(self) -> str:
        return "NOTHING"


#: "No value yet": a sentinel distinct from every item and from None.
NOTHING: Any = _Nothing()


class Stage:
    """The logic of one run of an operator: hooks called by the kit, actions called by the hooks.

    Subclass it, make the factory with :func:`rxpipe.stage.operator`, and apply it with
    ``pipe``::

        class DistinctUntilChanged(Stage):
            prefetch = 16
            def __init__(self, key_mapper=None):
                self.key_mapper, self.last = key_mapper, Stage.NOTHING
            def on_next(self, item):
                key = self.key_mapper(item) if self.key_mapper else item
                if key != self.last:
                    self.emit(item)
                self.last = key

        distinct_until_changed = operator(DistinctUntilChanged)   # (*args, name=None, **kw) -> operator

    One instance per subscription (``__init__`` also runs once when the operator is made, to
    check its arguments early; keep it free of side effects). Hooks are never called re-entrantly
    and never after the stage terminated: they are serial, like every signal (Reactive Streams
    §1.3). A hook that raises makes the stage fail with that exception (``on_error`` downstream,
    upstream cancelled, logged once on the ``rxpipe`` logger).

    Upstream credit (class attribute ``prefetch``), kept topped up by the kit:

    - an int ``p >= 1`` (default 16): the window. Upstream outstanding + :attr:`held` + items
      emitted and waiting for downstream demand stay <= ``p`` while the stream moves; the kit
      requests ``p`` at start, then what is free again each time at least ``replenish`` is
      (default ``p - p // 4``, Reactor's ``limitRate``), and early, whatever is free, when
      downstream is owed items, none waits and no upstream of the stage has anything
      outstanding. An input that emitted nothing frees its credit at once (a filter never
      stalls); outputs waiting for a slow downstream pause upstream (memory stays bounded).
    - ``None``: demand-driven, no read-ahead: upstream is asked only for what downstream asked
      and is not yet covered (outstanding + held + waiting outputs <= downstream demand).
      A dropped item asks for one more. For filters and for stages that delay items.
    - ``rxpipe.UNBOUNDED``: upstream is asked for everything once (lossy stages: debounce,
      sample). Emit only while :attr:`demanded` > 0, or drop with :meth:`drop`: the kit cannot
      pause such an upstream.

    **No stall by construction**: what a stage holds never closes its own window. When
    downstream wants items, none waits in the output queue, no upstream or input of the stage
    has anything outstanding and no timer of the stage is pending, the held items can only be
    released by more input, so the kit requests the window again *beyond* :attr:`held` (the
    window's ``p``; demand-driven: what downstream asked). :attr:`held` is bounded instead by
    ``max_held`` (class or instance attribute, items, default 4096): past it the stage fails
    with :class:`rxpipe.BufferOverflowError` naming the stage and the cap, never hangs. A
    negative :attr:`held` fails it with ValueError. A stage whose held items are released by
    something else (calls in flight ended through :meth:`invoke`, open inner streams: a
    concurrency limit, as ``map_async`` and ``flat_map``) sets ``held_bounds_credit = True``:
    then held counts against the window strictly and no request is made beyond it.

    **A many-to-one stage** (lists, groups, aggregates: ``buffer_with_count``) keeps what it
    has gathered and counts it in :attr:`held`; it emits when a group is full and what is
    left at completion, and needs no credit arithmetic and no ``prefetch`` above the group
    size::

        class BufferWithCount(Stage):
            def __init__(self, count):
                self.count, self.group = count, []
            def on_next(self, item):
                self.group.append(item)
                self.held = len(self.group)          # kept, not yet emitted
                if len(self.group) == self.count:
                    self.emit(self.group)
                    self.group, self.held = [], 0
            def on_complete(self):
                if self.group:
                    self.emit(self.group)
                    self.group, self.held = [], 0
                self.complete()

    Check it with ``check_operator(..., emits_every_item=False)``: it emits fewer items than
    it takes.

    ``lazy = True`` (default False) holds every upstream request back while downstream wants
    nothing the stage has not emitted yet (:attr:`demanded` is 0); once it does, the window
    above applies. For stages that emit at completion (reducers) or once (``first``): nothing
    is read before someone asks for the result (Akka's ``fold`` pulls only on downstream's pull).

    :attr:`held` (int >= 0, default 0) is the number of upstream items the stage keeps and
    cannot emit yet (items waiting on a timer or for a partner, a partial group, open inner
    streams): keep it current; it counts against the window in normal rounds (memory stays
    bounded) and against ``max_held`` always. Items ready to go downstream belong in the
    output queue: ``emit`` them at once (they wait there for demand, count against every
    window, and make a slow consumer cost upstream one request per round); hold only what is
    not ready. An item consumed and neither emitted nor held is discarded: count it with
    :meth:`drop` (``rxpipe_stage_dropped_total``) when the stage is lossy.

    Hooks (all optional but ``on_next``): :meth:`on_start`, :meth:`on_next`, :meth:`on_complete`,
    :meth:`on_error`, :meth:`on_cancel`, :meth:`on_stop`, :meth:`on_timer`, :meth:`on_request`, and for inputs
    opened with :meth:`open_input`: :meth:`on_input_next`, :meth:`on_input_complete`,
    :meth:`on_input_error`. Actions: :meth:`emit`, :meth:`complete`, :meth:`fail`, :meth:`drop`,
    :meth:`start_timer`, :meth:`cancel_timer`, :meth:`open_input`, :meth:`pull`, :meth:`invoke`,
    :meth:`cancel_upstream`.
    State: :attr:`demanded`, :attr:`outstanding`, :attr:`now`, :attr:`stage_name`, :attr:`upstream_flowable`.

    ``items_per_output = k`` (default 1; demand-driven stages only) counts downstream demand in
    upstream items for a stage emitting lists of up to ``k`` items (``buffer_with_count``): a
    ``request(n)`` asks upstream for up to ``n * k`` items (capped at ``UNBOUNDED``), its emitted
    lists waiting downstream count ``k`` each (Reactor ``FluxBuffer``'s ``multiplyCap``).

    Class attributes: ``prefetch`` (above), ``replenish`` (items, None: ``p - p // 4``),
    ``max_held`` and ``held_bounds_credit`` (above), ``lazy`` (above), ``log_hook_errors``
    (False: a hook's exception is signalled without a log line, for hooks that call user
    functions), ``kind`` (the operator's name in graphs and
    default stage names; None: the class name in snake_case), ``passes_capabilities`` (True for a
    stage whose items are its upstream's items,
    e.g. a filter: it shows the upstream's declared capabilities), ``inputs_first`` (True: the
    inputs get their credit before the main upstream, see :meth:`open_input`), ``reports_busy``
    (True: the stage keeps :attr:`busy`, the items it is working on, e.g. calls in flight). Class method
    :meth:`graph_inputs`: the Flowables the stage will open, when its arguments name them.

    Anchor: Akka Streams ``GraphStageLogic`` (handlers, ``push``/``pull``,
    ``TimerGraphStageLogic``; a stage that holds keeps pulling); Reactive Streams 1.0.4 (what
    the kit enforces).
    """

    __slots__ = ("_kit", "held")

    #: "No value yet": a sentinel distinct from every item and from None.
    NOTHING: ClassVar[Any] = NOTHING
    #: Upstream credit: an int window, None (demand-driven) or rxpipe.UNBOUNDED (see above).
    prefetch: ClassVar[int | None] = 16
    #: Items freed in the window before the kit requests again (None: prefetch - prefetch // 4).
    replenish: ClassVar[int | None] = None
    #: No upstream request while downstream wants nothing not yet emitted (see above).
    lazy: ClassVar[bool] = False
    #: Items the stage may hold (``held``) before it fails with BufferOverflowError.
    max_held: ClassVar[int] = 4096
    #: Demand-driven stages (prefetch None) that emit lists of up to k items: each item downstream
    #: asks for is worth k upstream items (``request(n)`` -> ``n * k``, capped at UNBOUNDED).
    items_per_output: ClassVar[int] = 1
    #: Held items are released by something other than more input (calls, inner streams):
    #: they bound upstream credit strictly (a concurrency limit), see above.
    held_bounds_credit: ClassVar[bool] = False
    #: The operator's name (None: the class name in snake_case).
    kind: ClassVar[str | None] = None
    #: The stage's items are its upstream's items (it shows the upstream's capabilities).
    passes_capabilities: ClassVar[bool] = False
    #: Log a hook's exception (once) before failing the stream with it. False for a stage whose
    #: hooks call the user's functions (a key mapper, a predicate): their errors are the stream's
    #: errors, signalled downstream without a log line, as ``map``'s are.
    log_hook_errors: ClassVar[bool] = True
    #: Credit goes to the inputs before the main upstream (see :meth:`open_input`).
    inputs_first: ClassVar[bool] = False
    #: The stage keeps :attr:`busy` current (the live view's busy time; see there).
    reports_busy: ClassVar[bool] = False
    #: Items the stage is working on now (calls in flight), for a stage with ``reports_busy =
    #: True``: the live view counts the stage busy while it is > 0. Change it inside hooks (a
    #: call's end comes back through :meth:`invoke`), where the kit re-reads it. (A subclass
    #: with ``__slots__`` lists ``"busy"`` in them.)
    busy: int = 0

    _kit: StageRun
    held: int

    @classmethod
    def graph_inputs(cls, *args: Any, **kwargs: Any) -> tuple[Flowable[Any], ...]:
        """The Flowables this stage will open with :meth:`open_input` that its arguments name
        (``zip``'s others), given the arguments of ``__init__``. They are listed after the
        source as the node's ``upstreams``, so graphs (``rxpipe graph``) and the runtime (which
        starts the services it finds upstream, e.g. a gateway) see them. Default: none (inputs
        made at run time, like ``flat_map``'s inner streams, cannot be listed)."""
        return ()

    # -- hooks ---------------------------------------------------------------------------------
    def on_start(self) -> None:
        """The stage is linked both ways, before any item and before the first request
        upstream: start timers, open inputs. Default: nothing."""

    def on_next(self, item: Any) -> None:
        """One upstream item, already counted against demand (never beyond it, never None)."""
        raise NotImplementedError(f"{type(self).__name__} must implement on_next(item)")

    def on_complete(self) -> None:
        """Upstream completed. Default: :meth:`complete` (after the items emitted before it)."""
        self.complete()

    def on_error(self, error: BaseException) -> None:
        """Upstream failed with ``error``. Default: :meth:`fail` with it."""
        self.fail(error)

    def on_cancel(self) -> None:
        """Downstream cancelled. The kit then cancels upstream, inputs and timers and clears the
        emitted items; items the stage keeps are its own to release. Default: nothing."""

    def on_stop(self) -> None:
        """The stage terminated (completed, failed, or cancelled: after :meth:`on_cancel`):
        release what it holds (tasks, connections). Called once, last; emitting is over.
        Default: nothing. Anchor: Akka ``GraphStageLogic.postStop``."""

    def on_timer(self, key: Hashable) -> None:
        """The timer ``key`` fired (see :meth:`start_timer`). Default: nothing."""

    def on_request(self, n: int) -> None:
        """Downstream asked for ``n`` more items (after the kit counted them), before any of it
        is passed upstream. Demand that came before the stage started (a downstream asking in
        its ``on_subscribe``, as ``to_list`` and ``async for`` do) is heard once, right after
        :meth:`on_start`, as ``on_request(that demand)``. Default: nothing."""

    def on_input_next(self, input: Input, item: Any) -> None:
        """An item from an input opened with :meth:`open_input`. Default: :meth:`emit` it."""
        self.emit(item)

    def on_input_complete(self, input: Input) -> None:
        """An input completed (it is closed now). Default: nothing."""

    def on_input_error(self, input: Input, error: BaseException) -> None:
        """An input failed (it is closed now). Default: :meth:`fail` with ``error``."""
        self.fail(error)

    # -- actions -------------------------------------------------------------------------------
    def emit(self, item: Any) -> None:
        """Send ``item`` downstream: delivered at once on demand, else queued until downstream
        asks (the queue counts against the window, so upstream pauses).

        Raises TypeError for None (Reactive Streams §2.13) and RuntimeError after
        :meth:`complete`/:meth:`fail`; ignored once downstream cancelled.
        """
        self._kit.emit(item)

    def complete(self) -> None:
        """Complete the stream after the items emitted before; cancel upstream (if it has not
        ended), inputs and timers. Idempotent."""
        self._kit.complete()

    def fail(self, error: BaseException, *, after_queued: bool = False) -> None:
        """Fail the stream with ``error`` now, ahead of queued items (dropped and told
        ``on_discard("error")``); cancel upstream, inputs and timers. Idempotent.

        ``after_queued=True``: signal ``error`` after the items already emitted instead, as
        :meth:`complete` does with its completion (they are delivered on demand first; Reactor's
        ``delayError``); ignored after :meth:`complete` or :meth:`fail`.
        """
        if after_queued:
            self._kit.complete(error)
        else:
            self._kit.fail(error)

    def drop(self, item: Any, reason: str) -> None:
        """Count ``item`` as dropped for ``reason`` (metric ``rxpipe_stage_dropped_total{reason}``)
        and tell it (``item.on_discard(reason)`` if it has one): for lossy stages."""
        self._kit.drop(item, reason)

    def start_timer(self, key: Hashable, delay_s: float, *, interval_s: float | None = None) -> None:
        """Call :meth:`on_timer` with ``key`` after ``delay_s`` seconds of the loop's clock, then
        every ``interval_s`` seconds if given (fixed rate; ticks missed by a busy loop are skipped).
        Both may be ``datetime.timedelta`` too.

        Starting a timer with a key in use replaces it. Timers end with the stage. Raises
        ValueError for a negative or non-finite delay, RuntimeError off an event loop.
        Anchor: Akka ``TimerGraphStageLogic.scheduleOnce`` / ``scheduleAtFixedRate``.
        """
        self._kit.start_timer(key, delay_s, interval_s)

    def cancel_timer(self, key: Hashable) -> None:
        """Cancel the timer ``key`` (no-op if it is not running)."""
        self._kit.cancel_timer(key)

    def cancel_upstream(self) -> None:
        """Cancel the main upstream and go on with the inputs (e.g. continue with another
        stream: ``timeout(duetime, other)``). Idempotent; the upstream's later signals, its
        completion included, are not heard. Anchor: Akka ``GraphStageLogic.cancel(in)``."""
        self._kit.cancel_upstream()

    def open_input(self, source: Flowable[Any], *, prefetch: int | None = 32, key: Any = None) -> Input:
        """Subscribe to another ``source`` as an input of this stage; its signals come to
        :meth:`on_input_next` / :meth:`on_input_complete` / :meth:`on_input_error`.

        ``prefetch`` is its credit, with the meanings of the class attribute (int window, None:
        demand-driven, ``UNBOUNDED``); ``key`` is yours (e.g. an index). Inputs opened inside a
        hook are requested once it returned; by default the main upstream gets its credit first,
        then the inputs in the order they were opened; with the class attribute
        ``inputs_first = True`` the inputs get theirs first, so inputs opened in
        :meth:`on_start` are requested before the main upstream is (for a stage whose main items
        need the inputs' state, as ``with_latest_from``: Reactor subscribes the other source
        first, and a synchronous main source would otherwise run before any input). The returned
        :class:`~rxpipe.stage.Input` has ``held`` (count its items you keep), ``done`` and
        ``cancel()``. Raises TypeError for a source that is not a Flowable, RuntimeError after
        the stage terminated.
        """
        return self._kit.open_input(source, prefetch, key)

    def pull(self, input: Input | None = None) -> None:
        """Request now what the window of ``input`` (None: the main upstream) has free, even
        inside a hook: a synchronous source then runs at once, and the signals it sends back
        are handled right after the current hook, before the next upstream item (e.g. an inner
        stream opened in :meth:`on_next` runs before the next outer item arrives, as reactivex's
        ``flat_map`` and ``switch_map`` do). The kit's rounds rule otherwise requests after the
        hook. The inputs opened before ``input`` are topped up first, in order (an older input
        waiting for credit keeps its turn). Anchor: Akka ``GraphStageLogic.pull(in)``."""
        self._kit.pull(input)

    def invoke(self, callback: Any, *args: Any) -> bool:
        """Run ``callback(*args)`` as a hook of this stage, for signals from outside the kit
        (a task's done callback, a future, another library's callback): serially with the other
        hooks (queued if one is running), a raise fails the stage, and what it emitted is
        delivered and credit topped up after it. Returns False, without calling it, once the
        stage has terminated (then nothing downstream can hear of it: log what matters).
        Anchor: Akka ``GraphStageLogic.getAsyncCallback``."""
        return self._kit.invoke(callback, args)

    # -- state ---------------------------------------------------------------------------------
    @property
    def demanded(self) -> int:
        """Downstream demand not yet covered by emitted items (items; ``UNBOUNDED``: no limit)."""
        return self._kit.demanded()

    @property
    def outstanding(self) -> int:
        """Items requested from upstream and not yet received (``UNBOUNDED``: no limit)."""
        return self._kit.upstream_outstanding

    @property
    def now(self) -> float:
        """The loop's clock (``loop.time()``, seconds); RuntimeError off an event loop."""
        return self._kit.now()

    @property
    def stage_name(self) -> str:
        """The stage's name (its ``stage`` label in metrics)."""
        return self._kit.counters.stage

    @property
    def upstream_flowable(self) -> Flowable[Any]:
        """The Flowable this stage was applied to (e.g. to subscribe to it again: ``retry``)."""
        return self._kit.flowable.source

    def __repr__(self) -> str:
        return f"<{type(self).__name__} stage>"
