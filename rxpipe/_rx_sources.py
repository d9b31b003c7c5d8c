"""reactivex's creation functions, with demand (DESIGN §3, "The kit, third round").

Same names and argument order as ``reactivex`` 6.1, so RxPY code runs as written; what RxPY
lacks is the demand rule, given in each docstring. Pull sources (``of``, ``generate``,
``repeat_value``) emit exactly what is requested; the one push source, :func:`create`, is
bounded by a buffer with ``buffer``'s overflow meanings; the combinators over several sources
(``amb``, ``fork_join``, ``on_error_resume_next``) are :class:`~rxpipe.stage.Stage` s whose
sources are inputs with their own credit. No scheduler argument: rxpipe's time is the loop's
clock.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

from ._demand import EMPTY_SUBSCRIPTION
from ._fusion import SyncSource
from ._loop_sources import from_future, never
from ._protocol import Publisher, Subscriber
from ._stage_logic import Stage
from ._stage_run import Input, StageFlowable
from .flowable import DEFAULT_PREFETCH, Flowable
from .interop import OBSERVABLE_OVERFLOW, _ObservableFlowable
from .settings import check_int
from .sources import defer, empty, error, from_iterable

__all__ = ["of", "from_", "from_list", "return_value", "throw", "create", "generate", "repeat_value",
           "from_callable", "start", "amb", "fork_join", "case", "if_then", "using", "on_error_resume_next"]

T = TypeVar("T")


def of(*args: T, name: str | None = None) -> Flowable[T]:
    """The arguments, in order, then completion.

        of(a, b, c):  (abc|)     one column: emitted as requested

    Demand: emits exactly what is requested (a pull source); completes after the last argument.
    Anchor: reactivex ``of``; Reactor ``Flux.just(T...)``.
    """
    return SyncSource(args, "of", name)


def from_(iterable: Iterable[T], *, name: str | None = None) -> Flowable[T]:
    """The items of ``iterable`` (``iter()`` per subscription), then completion; a raising
    iterator signals its exception. Demand: what is requested, no read-ahead (the next item is
    taken only to see the end, as Reactor's ``fromIterable``). Anchor: reactivex ``from_``."""
    return from_iterable(iterable, name=name)


def from_list(iterable: Iterable[T], *, name: str | None = None) -> Flowable[T]:
    """:func:`from_` under reactivex's other name (any iterable). Anchor: reactivex ``from_list``."""
    return from_iterable(iterable, name=name)


def return_value(value: T, *, name: str | None = None) -> Flowable[T]:
    """``value`` once, on the first request, then completion. Signals TypeError for None
    (Reactive Streams §2.13). Anchor: reactivex ``return_value``; Reactor ``Mono.just``."""
    return SyncSource((value,), "return_value", name)


def throw(exception: BaseException | str, *, name: str | None = None) -> Flowable[Any]:
    """``on_error(exception)`` at subscription, without any request (a ``str`` becomes
    ``Exception(str)``, as in reactivex). Anchor: reactivex ``throw``; Reactor ``Flux.error``."""
    return error(Exception(exception) if isinstance(exception, str) else exception, name=name)


# -- create: a push source, bounded --------------------------------------------------------------------
class _Observer:
    """What ``create``'s subscribe function pushes into: ``on_next``/``on_error``/``on_completed``."""

    __slots__ = ("on_next", "on_error", "on_completed")

    def __init__(self, on_next: Any, on_error: Any, on_completed: Any) -> None:
        self.on_next, self.on_error, self.on_completed = on_next, on_error, on_completed


class _Disposable:
    __slots__ = ("dispose",)

    def __init__(self, dispose: Callable[[], Any]) -> None:
        self.dispose = dispose


def _nothing() -> None:
    return None


class _SubscribeFunction:
    """``create``'s function as the Observable :class:`~rxpipe.interop.from_observable` reads."""

    def __init__(self, subscribe_fn: Callable[[Any, Any], Any]) -> None:
        self.subscribe_fn = subscribe_fn

    def subscribe(self, on_next: Any, on_error: Any, on_completed: Any) -> _Disposable:
        result = self.subscribe_fn(_Observer(on_next, on_error, on_completed), None)
        if result is None:
            return _Disposable(_nothing)
        if callable(getattr(result, "dispose", None)):
            return _Disposable(result.dispose)
        if callable(result):
            return _Disposable(result)
        raise TypeError(f"create(): the subscribe function returned {result!r}, not a disposable, a "
                        f"callable or None")


class _CreateFlowable(_ObservableFlowable):
    kind = "create"


def create(subscribe_fn: Callable[[Any, Any], Any], capacity: int = 256, overflow: str = "error", *,
           name: str | None = None) -> Flowable[Any]:
    """A push source from ``subscribe_fn(observer, scheduler)``, bounded by a buffer.

        pushes:    (abc|)      capacity=2, three pushes before any demand
        demand:    -^9
        output:    -(ab#)      overflow="error": BufferOverflowError after the buffered items

    ``subscribe_fn`` is called per subscription (after downstream's ``on_subscribe``) with an
    observer (``on_next(item)``, ``on_error(error)``, ``on_completed()``) and ``scheduler=None``;
    it returns a disposable (``dispose()``), a callable, or None; cancel disposes it. The function
    pushes when it likes, so this is where push becomes pull: pushes wait in a buffer of at most
    ``capacity`` items and go downstream on demand; a push into a full buffer is shed per
    ``overflow`` (``buffer``'s meanings): ``"drop_incoming"``, ``"drop_oldest"``, or ``"error"``
    (dispose, deliver what is buffered, then ``BufferOverflowError``). Shed items are counted
    (``rxpipe_stage_dropped_total{reason}``) and told ``on_discard(reason)``. Pushes after a
    terminal signal are ignored (reactivex's auto-detach).
    Args: capacity (items, >= 1); overflow (as above; ``"backpressure"`` is refused: a push
        source cannot be slowed).
    Signals: ValueError (raised here) for a bad ``capacity``/``overflow``, TypeError for a
        ``subscribe_fn`` that is not callable; ``subscribe_fn`` raising → ``on_error``; a pushed
        None → TypeError (§2.13).
    Anchor: reactivex ``create``; Reactor ``Flux.create(emitter, OverflowStrategy)``.
    """
    if not callable(subscribe_fn):
        raise TypeError(f"create() needs a subscribe function (observer, scheduler), got {subscribe_fn!r}")
    if overflow not in OBSERVABLE_OVERFLOW:
        raise ValueError(f"create(overflow={overflow!r}): a push source cannot be slowed; choose what to "
                         f"shed: one of {', '.join(OBSERVABLE_OVERFLOW)}")
    check_int(capacity, "create(capacity)", minimum=1)
    return _CreateFlowable(_SubscribeFunction(subscribe_fn), capacity, overflow, name)


# -- pull sources from functions --------------------------------------------------------------------
class _Generate:
    def __init__(self, initial_state: Any, condition: Callable[[Any], Any], iterate: Callable[[Any], Any]) -> None:
        self.initial_state, self.condition, self.iterate = initial_state, condition, iterate

    def __iter__(self) -> Iterator[Any]:
        state = self.initial_state
        while self.condition(state):
            yield state
            state = self.iterate(state)


def generate(initial_state: Any, condition: Callable[[Any], Any], iterate: Callable[[Any], Any], *,
             name: str | None = None) -> Flowable[Any]:
    """``initial_state``, ``iterate(initial_state)``, ... while ``condition(state)`` holds.

        generate(0, lambda x: x < 3, lambda x: x + 1):  (012|)

    Demand: a pull source: ``iterate`` and ``condition`` run only for requested items (one more
    to see the end). Per subscription the state starts again. Signals: ``condition`` or
    ``iterate`` raising → ``on_error`` with it. Anchor: reactivex ``generate``; Reactor ``generate``.
    """
    for label, fn in (("condition", condition), ("iterate", iterate)):
        if not callable(fn):
            raise TypeError(f"generate({label}) needs a callable, got {fn!r}")
    return SyncSource(_Generate(initial_state, condition, iterate), "generate", name)


class _Repeat:
    def __init__(self, value: Any, count: int | None) -> None:
        self.value, self.count = value, count

    def __iter__(self) -> Iterator[Any]:
        value = self.value
        if self.count is None:
            while True:
                yield value
        for _ in range(self.count):
            yield value


def repeat_value(value: T, repeat_count: int | None = None, *, name: str | None = None) -> Flowable[T]:
    """``value`` ``repeat_count`` times (None or -1: for ever), then completion.

        repeat_value(a, 3):  (aaa|)

    Demand: exactly what is requested, so the endless form is safe (``take`` ends it).
    Signals: ValueError for ``repeat_count < -1``. Anchor: reactivex ``repeat_value``;
    Reactor ``Flux.just(v).repeat(n)``.
    """
    if repeat_count == -1:
        repeat_count = None
    if repeat_count is not None:
        check_int(repeat_count, "repeat_value(repeat_count)", minimum=0)
    return SyncSource(_Repeat(value, repeat_count), "repeat_value", name)


def from_callable(supplier: Callable[[], T], *, name: str | None = None) -> Flowable[T]:
    """``supplier()``'s result, called once per subscription (at subscribe), then completion.

    Demand: the one value waits for a request. Signals: ``supplier`` raising → ``on_error``;
    a None result → TypeError (§2.13). Anchor: reactivex ``from_callable``; Reactor
    ``Mono.fromCallable``.
    """
    if not callable(supplier):
        raise TypeError(f"from_callable() needs a callable, got {supplier!r}")
    return defer(lambda: SyncSource((supplier(),), "from_callable", None), name=name)


class _Start(Flowable[Any]):
    """``start(func)``: one shared run of ``func``, begun at the first subscription."""

    kind = "start"

    def __init__(self, func: Callable[[], Any], name: str | None) -> None:
        super().__init__(name=name)
        self.func = func
        self.job: asyncio.Future[Any] | None = None

    def _begin(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Any]:
        """Start the one run (at the first subscription, on the subscriber's loop)."""
        if inspect.iscoroutinefunction(self.func):
            return asyncio.ensure_future(self.func())
        return loop.run_in_executor(None, self.func)  # reactivex runs it on a thread too

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        if self.job is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
                subscriber.on_error(RuntimeError(f"{self.kind}() must be subscribed on a running event loop"))
                return
            try:
                self.job = self._begin(loop)
            except Exception as error:  # the call itself raised: every subscriber hears of it
                self.job = loop.create_future()
                self.job.set_exception(error)
        # shield: a subscriber that cancels stops listening; the shared run goes on for the others
        from_future(asyncio.shield(self.job))._subscribe(subscriber)


def start(func: Callable[[], Any], *, name: str | None = None) -> Flowable[Any]:
    """Run ``func`` once, in the background, and give every subscriber its result.

        start(f):  ----(r|)     r = f(), when it returns and is requested

    A plain function runs on the loop's default executor (a thread, as reactivex's default
    scheduler does); a coroutine function runs as a task. The run begins at the first
    subscription (reactivex begins at the call: rxpipe needs the subscriber's loop) and is
    shared: later subscribers get the same result (reactivex's AsyncSubject); a subscriber that
    cancels stops listening without stopping the run.
    Demand: one value, delivered when requested. Signals: ``func`` raising → ``on_error`` for
    every subscriber; RuntimeError off an event loop. Anchor: reactivex ``start`` / ``to_async``.
    """
    if not callable(func):
        raise TypeError(f"start() needs a callable, got {func!r}")
    return _Start(func, name)


# -- choosing a source at subscription ----------------------------------------------------------------
def case(mapper: Callable[[], Any], sources: Mapping[Any, Any], default_source: Any = None, *,
         name: str | None = None) -> Flowable[Any]:
    """Subscribe to ``sources[mapper()]``, chosen per subscription; ``default_source`` (default:
    empty) when the key is missing. Sources may be Flowables, Publishers, iterables or awaitables.
    Demand: that of the chosen source. Signals: ``mapper`` raising → ``on_error``.
    Anchor: reactivex ``case``."""
    if not callable(mapper):
        raise TypeError(f"case() needs a mapper callable, got {mapper!r}")

    def choose() -> Any:
        key = mapper()
        if key in sources:
            return sources[key]
        return empty() if default_source is None else default_source

    return defer(choose, name=name)


def if_then(condition: Callable[[], Any], then_source: Any, else_source: Any = None, *,
            name: str | None = None) -> Flowable[Any]:
    """Subscribe to ``then_source`` if ``condition()`` is truthy, else to ``else_source``
    (default: empty); decided per subscription. Demand: that of the chosen source. Signals:
    ``condition`` raising → ``on_error``. Anchor: reactivex ``if_then``."""
    if not callable(condition):
        raise TypeError(f"if_then() needs a condition callable, got {condition!r}")
    return defer(lambda: then_source if condition() else (empty() if else_source is None else else_source),
                 name=name)


class _Release(Stage):
    """Pass-through that releases ``using``'s resource once the stream ended, however."""

    prefetch = None
    passes_capabilities = True
    kind = "using"

    def __init__(self, resource: Any) -> None:
        self.resource = resource

    def on_next(self, item: Any) -> None:
        self.emit(item)

    def on_stop(self) -> None:
        _release(self.resource)


def _release(resource: Any) -> None:
    for method in ("dispose", "close"):
        release = getattr(resource, method, None)
        if callable(release):
            release()
            return


class _Using(Flowable[Any]):
    kind = "using"

    def __init__(self, resource_factory: Callable[[], Any], observable_factory: Callable[[Any], Any],
                 name: str | None) -> None:
        super().__init__(name=name)
        self.resource_factory, self.observable_factory = resource_factory, observable_factory

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        resource = None
        try:
            resource = self.resource_factory()
            source = _as_flowable(self.observable_factory(resource))
        except Exception as exc:
            if resource is not None:
                _release(resource)
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(exc)
            return
        StageFlowable(source, _Release, (resource,), {}, "using", self.name)._subscribe(subscriber)


def using(resource_factory: Callable[[], Any], observable_factory: Callable[[Any], Any], *,
          name: str | None = None) -> Flowable[Any]:
    """Per subscription: ``resource = resource_factory()``, then the items of
    ``observable_factory(resource)``; the resource is released (``dispose()``, else ``close()``)
    once the stream completed, failed or was cancelled.

    Demand: passed through exactly. Signals: either factory raising → ``on_error`` (the resource,
    if made, released). Anchor: reactivex ``using``; Reactor ``Flux.using``.
    """
    for label, fn in (("resource_factory", resource_factory), ("observable_factory", observable_factory)):
        if not callable(fn):
            raise TypeError(f"using({label}) needs a callable, got {fn!r}")
    return _Using(resource_factory, observable_factory, name)


def _as_flowable(source: Any) -> Flowable[Any]:
    if isinstance(source, Flowable):
        return source
    return defer(lambda: source)  # defer adapts Publishers, iterables and awaitables


# -- several sources: amb, fork_join, on_error_resume_next ---------------------------------------------
class _OfSources(Stage):
    """A stage over ``empty()`` whose sources are all inputs (it has no main upstream of its own)."""

    prefetch = None

    def __init__(self, sources: tuple[Any, ...]) -> None:
        self.sources = sources

    @classmethod
    def graph_inputs(cls, sources: tuple[Any, ...]) -> tuple[Flowable[Any], ...]:
        return tuple(s for s in sources if isinstance(s, Flowable))

    def on_next(self, item: Any) -> None:  # pragma: no cover - the main upstream is empty()
        raise AssertionError("no main items")

    def on_complete(self) -> None:
        """The empty main upstream ended: the stage goes on with its inputs."""


class _Amb(_OfSources):
    """One run of ``amb``: ``winner`` is the input that signalled first."""

    kind = "amb"

    def on_start(self) -> None:
        self.winner: Input | None = None
        for source in self.sources:
            if self.winner is not None:
                break
            self.open_input(source, prefetch=None)

    def win(self, input: Input) -> bool:
        if self.winner is None:
            self.winner = input
            for other in [i for i in self._kit.inputs if i is not input]:
                other.cancel()
        return self.winner is input

    def on_input_next(self, input: Input, item: Any) -> None:
        if self.win(input):
            self.emit(item)

    def on_input_complete(self, input: Input) -> None:
        if self.win(input):
            self.complete()

    def on_input_error(self, input: Input, error: BaseException) -> None:
        if self.win(input):
            self.fail(error)


def amb(*sources: Flowable[Any], name: str | None = None) -> Flowable[Any]:
    """The source that signals first (an item, its completion or its error); the others are
    cancelled. No source: never signals (reactivex).

        a:       ---x-y|
        b:       --u---v|
        output:  --u---v|        b signalled first: a is cancelled

    Demand: until one wins, each source is asked for what downstream wants (demand-driven: no
    read-ahead); then only the winner. Between synchronous sources the first subscribed wins
    (it emits inside its first request); reactivex's choice between them is its scheduler's.
    Anchor: reactivex ``amb``; Reactor ``Flux.firstWithSignal``.
    """
    _check_sources("amb", sources)
    if not sources:
        return never(name=name)
    return StageFlowable(empty(), _Amb, (sources,), {}, "amb", name)


class _ForkJoin(_OfSources):
    """One run of ``fork_join``: the last value of each source (``NOTHING`` until it has one)."""

    kind = "fork_join"
    lazy = True  # nothing is read before someone asks for the result

    def on_start(self) -> None:
        self.last = [Stage.NOTHING] * len(self.sources)
        self.left = len(self.sources)
        for position, source in enumerate(self.sources):
            self.open_input(source, prefetch=DEFAULT_PREFETCH, key=position)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.last[input.key] = item  # kept, not held: only the latest value counts

    def on_input_complete(self, input: Input) -> None:
        if self.last[input.key] is Stage.NOTHING:
            self.complete()  # a source ended empty: no tuple can be made (reactivex)
            return
        self.left -= 1
        if not self.left:
            self.emit(tuple(self.last))
            self.complete()


def fork_join(*sources: Flowable[Any], name: str | None = None) -> Flowable[tuple[Any, ...]]:
    """Wait for every source to complete; emit one tuple of their last values, then complete.

        a:       -1--2----|
        b:       ---x---y-------|
        output:  ---------------((2,y)|)

    A source that completes without a value completes the result at once, empty (the others
    are cancelled); any error is signalled at once. Demand: nothing is requested before
    downstream asks for the result; then each source in rounds of ``DEFAULT_PREFETCH`` (256,
    then 75 % replenish), never UNBOUNDED; only the last value of each is kept.
    Signals: TypeError (raised here) for no source or one that is not a Flowable.
    Anchor: reactivex ``fork_join``; Reactor ``Mono.zip`` over ``last()``.
    """
    if not sources:
        raise TypeError("fork_join() needs at least one source")
    _check_sources("fork_join", sources)
    return StageFlowable(empty(), _ForkJoin, (sources,), {}, "fork_join", name)


class _ResumeNext(_OfSources):
    """One run of ``on_error_resume_next``: ``position`` is the next source to subscribe."""

    kind = "on_error_resume_next"

    def on_start(self) -> None:
        self.position = 0
        self.next_source(None)

    def next_source(self, error: BaseException | None) -> None:
        if self.position == len(self.sources):
            self.complete()
            return
        source = self.sources[self.position]
        self.position += 1
        if not isinstance(source, Publisher) and callable(source):
            source = source(error)  # reactivex: a function of the error (None after a completion)
        self.open_input(_as_flowable(source), prefetch=None)

    def on_input_complete(self, input: Input) -> None:
        self.next_source(None)

    def on_input_error(self, input: Input, error: BaseException) -> None:
        self.next_source(error)


def on_error_resume_next(*sources: Any, name: str | None = None) -> Flowable[Any]:
    """The sources one after another, going on to the next when one completes *or fails*;
    completes after the last (its error too is swallowed, as in reactivex).

        a:       -x#
        b:          -y|
        output:  -x--y|

    A source may be a Flowable, a Publisher, an awaitable, an iterable, or a function
    ``(error or None) -> source`` called when its turn comes. Demand: one source at a time,
    asked exactly what downstream still wants; the outstanding demand carries over.
    Anchor: reactivex ``on_error_resume_next``; Reactor ``onErrorResume`` chained.
    """
    return StageFlowable(empty(), _ResumeNext, (sources,), {}, "on_error_resume_next", name)


def _check_sources(op: str, sources: tuple[Any, ...]) -> None:
    for source in sources:
        if not isinstance(source, Flowable):
            raise TypeError(f"{op}() needs Flowables, got {source!r}")
