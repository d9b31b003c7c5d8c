"""reactivex's sequential creation functions over many sources, with demand: ``catch``,
``catch_with_iterable``, ``concat_with_iterable``, ``for_in`` (DESIGN §3, "The kit, third round").

One :class:`~rxpipe.stage.Stage` serves all four: it runs one source at a time, opened as a
demand-driven input (``prefetch=None``), so the current source is asked for exactly the
downstream demand still outstanding; what it delivered is never asked again, and the demand
left when it ends carries over to the next. The sources are taken from the iterable lazily: the
next one is read (``next(iterator)``) only when the one before has ended, and ``iter()`` is
called per subscription, as reactivex does.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, TypeVar

from ._protocol import Publisher
from ._stage_logic import Stage
from ._stage_run import Input, StageFlowable
from .flowable import Flowable
from .sources import empty, from_publisher

__all__ = ["catch", "catch_with_iterable", "concat_with_iterable", "for_in"]

T = TypeVar("T")
R = TypeVar("R")


class _OneAfterAnother(Stage):
    """One run: the sources one after another, taken from ``iterator``; the next one follows an
    error (catch: ``resume_on_error``) or a completion (concat)."""

    prefetch = None
    log_hook_errors = False  # the iterator and for_in's mapper are the user's: their errors are the stream's

    def __init__(self, sources: Iterable[Any], resume_on_error: bool, op: str) -> None:
        self.sources, self.resume_on_error, self.op = sources, resume_on_error, op

    @classmethod
    def graph_inputs(cls, sources: Iterable[Any], resume_on_error: bool, op: str) -> tuple[Flowable[Any], ...]:
        # a list or tuple can be read without consuming it; any other iterable is read only when run
        if isinstance(sources, (list, tuple)):
            return tuple(s for s in sources if isinstance(s, Flowable))
        return ()

    def on_start(self) -> None:
        self.iterator: Iterator[Any] = iter(self.sources)
        self.position = 0
        self.last_error: BaseException | None = None
        self.next_source()

    def next_source(self) -> None:
        try:
            source = next(self.iterator)
        except StopIteration:
            if self.last_error is not None:
                self.fail(self.last_error)  # catch: every source failed; the last error is the stream's
            else:
                self.complete()
            return
        self.position += 1
        if not isinstance(source, Publisher):
            self.fail(TypeError(f"{self.op}(): source {self.position} is {source!r}, not a Flowable"))
            return
        self.open_input(from_publisher(source), prefetch=None)

    def on_next(self, item: Any) -> None:  # pragma: no cover - the main upstream is empty()
        raise AssertionError("no main items")

    def on_complete(self) -> None:
        """The empty main upstream ended: the sources are the stream."""

    def on_input_complete(self, input: Input) -> None:
        if self.resume_on_error:
            self.complete()
        else:
            self.next_source()

    def on_input_error(self, input: Input, error: BaseException) -> None:
        if self.resume_on_error:
            self.last_error = error
            self.next_source()
        else:
            self.fail(error)


def _run(op: str, sources: Iterable[Any], resume_on_error: bool, name: str | None) -> Flowable[Any]:
    if not isinstance(sources, Iterable):
        raise TypeError(f"{op}() needs an iterable of Flowables, got {sources!r}")
    return StageFlowable(empty(), _OneAfterAnother, (sources, resume_on_error, op), {}, op, name)


def _check_flowables(op: str, sources: tuple[Any, ...]) -> None:
    for source in sources:
        if not isinstance(source, Flowable):
            raise TypeError(f"{op}() needs Flowables, got {source!r}")


def catch(*sources: Flowable[T], name: str | None = None) -> Flowable[T]:
    """The first source's items; when a source fails, go on with the next one; completes with
    the first source that completes.

        source:    -a-b#
        other:         -c|        subscribed when the source failed (frame 4)
        demand:    ^3
        output:    -a-b-c|        other is asked 1: 3 wanted, 2 given

    ``rx.catch(a, b, c)`` is ``rx.catch_with_iterable([a, b, c])``; with every source failed the
    last error is signalled; no source: completes at once.
    Demand: one source at a time, asked exactly what downstream still wants: the outstanding
    demand carries over to the next source, nothing delivered is asked again.
    Signals: TypeError (raised here) for an argument that is not a Flowable. Cancel reaches the
        running source only (the later ones are never subscribed).
    Anchor: reactivex ``catch(*sources)``; Reactor ``onErrorResume`` chained.
    """
    _check_flowables("catch", sources)
    return _run("catch", sources, True, name)


def catch_with_iterable(sources: Iterable[Flowable[T]], *, name: str | None = None) -> Flowable[T]:
    """:func:`catch` over an iterable of sources (a generator too), read lazily: the next source
    is taken from it only when the one before failed.

        source:    -a#
        other:       -b-c|        sources = [source, other]: other subscribed when source failed
        demand:    ^2      ^9
        output:    -a-b----(c|)   other is asked 1 at frame 2 (2 wanted, 1 given), then 9

    ``iter(sources)`` per subscription (a list replays; a generator serves the first subscriber
    only, as in reactivex). Completes with the first source that completes; every source
    failed: the last error; an empty iterable: completes at once.
    Demand: one source at a time, asked exactly what downstream still wants (the outstanding
    demand carries over); nothing delivered is asked again.
    Signals: TypeError (raised here) for ``sources`` that is not iterable; an item that is not a
        Flowable (or a Publisher) → ``on_error(TypeError)``; the iterator raising → ``on_error``
        with it. Cancel reaches the running source.
    Anchor: reactivex ``catch_with_iterable``; Reactor ``onErrorResume`` chained.
    """
    return _run("catch_with_iterable", sources, True, name)


def concat_with_iterable(sources: Iterable[Flowable[T]], *, name: str | None = None) -> Flowable[T]:
    """Each source's items in turn, the sources read lazily from an iterable (a generator too).

        source:    -a-b|
        other:         -c|        sources = [source, other]: other subscribed when source completed
        demand:    ^3
        output:    -a-b-c|        other is asked 1: 3 wanted, 2 given

    ``iter(sources)`` per subscription; the next source is taken only when the one before
    completed (an endless generator of sources is fine). An empty iterable completes at once.
    Demand: one source at a time, asked exactly what downstream still wants (the outstanding
    demand carries over); nothing delivered is asked again.
    Signals: TypeError (raised here) for ``sources`` that is not iterable; an item that is not a
        Flowable (or a Publisher) → ``on_error(TypeError)``; a source's error is signalled at
        once (no later source is read); the iterator raising → ``on_error`` with it. Cancel
        reaches the running source.
    Anchor: reactivex ``concat_with_iterable``; Reactor ``Flux.concat(Iterable)``.
    """
    return _run("concat_with_iterable", sources, False, name)


class _Mapped:
    """``map(mapper, values)`` made again per subscription (``iter()``), so a list of values replays."""

    def __init__(self, values: Iterable[Any], mapper: Callable[[Any], Any]) -> None:
        self.values, self.mapper = values, mapper

    def __iter__(self) -> Iterator[Any]:
        return map(self.mapper, self.values)


def for_in(values: Iterable[T], mapper: Callable[[T], Flowable[R]], *, name: str | None = None) -> Flowable[R]:
    """``concat_with_iterable(map(mapper, values))``: the stream ``mapper(value)`` for each value
    in turn, each made only when the one before completed.

        for_in([1, 2], lambda v: rx.of(v, 10 * v)):  1, 10, 2, 20, then completion

    Demand: one stream at a time, asked exactly what downstream still wants (the outstanding
    demand carries over); ``mapper`` runs for a value only when its stream's turn comes.
    ``map`` is made per subscription, so a list of values replays for every subscriber
    (reactivex makes it once, at the call: a second subscription there finds it exhausted).
    Signals: TypeError (raised here) for ``values`` that is not iterable or ``mapper`` that is not
        callable; ``mapper`` raising → ``on_error`` with it; a result that is not a Flowable →
        ``on_error(TypeError)``; a stream's error is signalled at once. Cancel reaches the
        running stream.
    Anchor: reactivex ``for_in``; Reactor ``Flux.fromIterable(values).concatMap(mapper)``.
    """
    if not isinstance(values, Iterable):
        raise TypeError(f"for_in() needs an iterable of values, got {values!r}")
    if not callable(mapper):
        raise TypeError(f"for_in() needs a mapper callable, got {mapper!r}")
    return _run("for_in", _Mapped(values, mapper), False, name)
