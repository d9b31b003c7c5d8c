"""Differential testing against reactivex 6.1 (DESIGN §3, "Operators, second round").

Under unbounded demand and cold sources, every rxpipe operator that RxPY also has must emit exactly
what reactivex emits for the same input: the same values in the same order and the same terminal
signal. This module runs one input through both and returns comparable notification lists:

- :func:`cases` — seeded random cold inputs: empty, short, long, and ending in an error;
- :func:`through_rxpipe` / :func:`through_reactivex` — the notifications of one case through an
  operator (``("N", value)``, ``("C",)``, ``("E", type name, message)``);
- :func:`timed_cases`, :func:`timed_through_rxpipe`, :func:`timed_through_reactivex` — the same on
  virtual time: items at given seconds, against ``reactivex.testing.TestScheduler``, each
  notification paired with its time (seconds after subscribe, rounded to the microsecond).

Errors compare by type and message (a user function raising makes a new exception per run).
"""

from __future__ import annotations

import asyncio
import functools
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import reactivex
import reactivex.operators as rxo
from reactivex.testing import ReactiveTest, TestScheduler

import rxpipe as rx
from rxpipe.testing import TestPublisher, run_virtual

Note = tuple[Any, ...]

__all__ = ["Case", "TimedCase", "Note", "cases", "timed_cases", "through_rxpipe", "through_reactivex",
           "timed_through_rxpipe", "timed_through_reactivex", "note_of_error", "now", "now_error"]


class SourceFailed(Exception):
    """The error a case's source ends with."""


@dataclass(frozen=True)
class Case:
    """A cold input: ``items`` in order, then completion, or ``error`` if given."""

    items: tuple[Any, ...]
    error: BaseException | None = None

    def __repr__(self) -> str:
        shown = list(self.items[:8]) + (["..."] if len(self.items) > 8 else [])
        return f"Case({shown}{', error' if self.error else ''}, n={len(self.items)})"


def cases(seed: int, count: int = 12, values: Callable[[random.Random], Any] | None = None) -> list[Case]:
    """``count`` seeded inputs: always the empty one, one item, a short run with repeats, a long
    run (50–200 items), and some ending in an error; items from ``values`` (default small ints,
    so that keys and duplicates repeat)."""
    rng = random.Random(seed)
    make = values or (lambda r: r.randint(0, 9))
    out = [Case(()), Case((make(rng),)), Case((), SourceFailed("empty then error"))]
    while len(out) < count:
        n = rng.choice((2, 3, 5, 8, 13, rng.randint(50, 200)))
        items = tuple(make(rng) for _ in range(n))
        error = SourceFailed(f"after {n} items") if rng.random() < 0.3 else None
        out.append(Case(items, error))
    return out


def note_of_error(error: BaseException) -> Note:
    return ("E", type(error).__name__, str(error))


def _items_then(case: Case) -> Iterator[Any]:
    yield from case.items
    if case.error is not None:
        raise case.error


def now(*items: Any) -> reactivex.Observable[Any]:
    """A reactivex stream that completes synchronously inside its subscribe (no trampoline of its
    current-thread scheduler), as rxpipe's ``rx.just`` does: an inner stream of it delivers its
    items before the next outer item (DESIGN §3, the kit's third round)."""
    def subscribe(observer: Any, scheduler: Any = None) -> None:
        for item in items:
            observer.on_next(item)
        observer.on_completed()
    return reactivex.create(subscribe)


def now_error(error: BaseException) -> reactivex.Observable[Any]:
    """A reactivex stream that fails synchronously inside its subscribe."""
    return reactivex.create(lambda observer, scheduler=None: observer.on_error(error))


def rxpipe_source(case: Case) -> rx.Flowable[Any]:
    """The case as an rxpipe cold source (a fresh run per subscription)."""
    return rx.defer(lambda: rx.from_iterable(_items_then(case)))


def reactivex_source(case: Case) -> reactivex.Observable[Any]:
    """The case as a reactivex cold source."""
    source = reactivex.from_iterable(case.items)
    if case.error is not None:
        source = reactivex.concat(source, reactivex.throw(case.error))
    return source


def through_rxpipe(build: Callable[[rx.Flowable[Any]], rx.Flowable[Any]], case: Case,
                   source: rx.Flowable[Any] | None = None) -> list[Note]:
    """Subscribe with unbounded demand to ``build(source of case)`` on a virtual-time loop and
    return its notifications once it terminates (AssertionError if it never does)."""
    notes: list[Note] = []

    async def main() -> None:
        done = asyncio.get_running_loop().create_future()

        def on_error(error: BaseException) -> None:
            notes.append(note_of_error(error))
            done.set_result(None)

        def on_complete() -> None:
            notes.append(("C",))
            done.set_result(None)

        handle = build(source if source is not None else rxpipe_source(case)).subscribe(
            on_next=lambda v: notes.append(("N", v)), on_error=on_error, on_complete=on_complete)
        try:
            await asyncio.wait_for(done, 10_000)  # virtual seconds
        except TimeoutError:
            handle.cancel()
            raise AssertionError(f"rxpipe never terminated on {case!r}; got {notes[:20]!r}") from None

    run_virtual(main())
    return notes


def through_reactivex(build: Callable[[reactivex.Observable[Any]], reactivex.Observable[Any]], case: Case,
                      source: reactivex.Observable[Any] | None = None) -> list[Note]:
    """Subscribe to ``build(source of case)`` on reactivex's current-thread scheduler and return
    its notifications (reactivex runs synchronous sources to the end inside ``subscribe``)."""
    notes: list[Note] = []
    build(source if source is not None else reactivex_source(case)).subscribe(
        on_next=lambda v: notes.append(("N", v)), on_error=lambda e: notes.append(note_of_error(e)),
        on_completed=lambda: notes.append(("C",)))
    return notes


# -- on virtual time ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimedCase:
    """A cold input on a clock: ``events`` are ``(seconds after subscribe, item)`` in time order,
    then completion at ``end_s`` (or ``error`` there)."""

    events: tuple[tuple[float, Any], ...]
    end_s: float
    error: BaseException | None = None


def timed_cases(seed: int, count: int = 10, values: Callable[[random.Random], Any] | None = None,
                gaps_s: tuple[float, ...] = (0.0, 0.1, 0.3, 0.5, 1.0, 2.5)) -> list[TimedCase]:
    """``count`` seeded timed inputs: empty, one item, bursts (gap 0) and pauses from ``gaps_s``,
    some ending in an error. Times are sums of ``gaps_s``; both sides' times are compared after
    rounding to the microsecond."""
    rng = random.Random(seed)
    make = values or (lambda r: r.randint(0, 9))
    out = [TimedCase((), 1.0), TimedCase(((0.5, make(rng)),), 2.0), TimedCase((), 0.7, SourceFailed("error at 0.7"))]
    while len(out) < count:
        t, events = 0.0, []
        for _ in range(rng.choice((2, 4, 8, 20))):
            t = round(t + rng.choice(gaps_s), 6)
            events.append((t, make(rng)))
        end = round(t + rng.choice(gaps_s), 6)
        error = SourceFailed(f"error at {end}") if rng.random() < 0.3 else None
        out.append(TimedCase(tuple(events), end, error))
    return out


def timed_through_rxpipe(build: Callable[[rx.Flowable[Any]], rx.Flowable[Any]], case: TimedCase,
                         horizon_s: float = 1000.0) -> list[tuple[float, Note]]:
    """Play ``case`` on a virtual-time loop into ``build`` with unbounded downstream demand; return
    ``(seconds after subscribe, note)`` per notification. The source emits each item at its time
    whatever was requested of it: an operator asking upstream for less shows as
    ``MissingBackpressureError`` (a real difference from reactivex, which has no demand)."""
    notes: list[tuple[float, Note]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        pub = TestPublisher[Any]()
        start = loop.time()
        done = loop.create_future()

        def at() -> float:
            return round(loop.time() - start, 6)

        def end(note: Note) -> None:
            notes.append((at(), note))
            if not done.done():
                done.set_result(None)

        handle = build(pub).subscribe(on_next=lambda v: notes.append((at(), ("N", v))),
                                      on_error=lambda e: end(note_of_error(e)), on_complete=lambda: end(("C",)))
        # One timer per instant, running that instant's signals in order: timers due at the same
        # time run in heap order, not in the order they were scheduled (asyncio keeps no tie-break).
        terminal = (lambda: pub.error(case.error)) if case.error is not None else pub.complete  # type: ignore[arg-type]
        instants: dict[float, list[Callable[[], Any]]] = {}
        for t, v in case.events:
            instants.setdefault(t, []).append(functools.partial(pub.emit, v))
        instants.setdefault(case.end_s, []).append(terminal)
        timers = [loop.call_at(start + t, _run_in_order, signals) for t, signals in instants.items()]
        try:
            await asyncio.wait_for(done, horizon_s)
        except TimeoutError:
            handle.cancel()
            raise AssertionError(f"rxpipe never terminated on {case!r}; got {notes[:20]!r}") from None
        finally:
            for timer in timers:
                timer.cancel()

    run_virtual(main())
    return notes


def _run_in_order(signals: list[Callable[[], Any]]) -> None:
    for signal in signals:
        signal()


def timed_through_reactivex(build: Callable[[reactivex.Observable[Any]], reactivex.Observable[Any]],
                            case: TimedCase, horizon_s: float = 1000.0) -> list[tuple[float, Note]]:
    """The same case through reactivex on its ``TestScheduler`` (times in seconds)."""
    scheduler = TestScheduler()
    messages = [ReactiveTest.on_next(t, v) for t, v in case.events]
    messages.append(ReactiveTest.on_error(case.end_s, case.error) if case.error is not None
                    else ReactiveTest.on_completed(case.end_s))
    xs = scheduler.create_cold_observable(*messages)
    subscribed = ReactiveTest.subscribed
    observer = scheduler.start(lambda: build(xs), disposed=subscribed + horizon_s)
    notes: list[tuple[float, Note]] = []
    for record in observer.messages:
        n = record.value
        note: Note = (("N", n.value) if n.kind == "N" else ("C",) if n.kind == "C"
                      else note_of_error(n.exception))  # type: ignore[attr-defined]
        notes.append((round(record.time - subscribed, 6), note))
    return notes



# -- timed streams made inside an operator (inner streams, other sources), second round ----------------
# Timeline, timeline, rxpipe_timeline, reactivex_timeline: the streams flat_map & co subscribe to
# themselves and zip & co's other sources, on the same clocks as timed_through_* (not in __all__).
@dataclass(frozen=True)
class Timeline:
    """A cold stream on a clock, relative to its own subscription: ``events`` are ``(seconds after
    subscribe, item)`` in time order, then completion at ``end_s`` (or ``error`` there). For the
    streams an operator subscribes to itself (``flat_map``'s inner streams, ``zip``'s other
    sources), where :func:`timed_through_rxpipe` drives only the source."""

    events: tuple[tuple[float, Any], ...]
    end_s: float
    error: BaseException | None = None


def timeline(rng: random.Random, items: list[Any], step_s: float = 0.0371, end_step_s: float = 0.0193,
             error_rate: float = 0.0, shift_s: float = 0.0) -> Timeline:
    """``items`` one every ``step_s`` (times random multiples of it, plus ``shift_s``), ending
    ``end_step_s`` after the last; the defaults are never a sum of :func:`timed_cases`' gaps, so the
    stream's events never fall on the same instant as the source's (which of two simultaneous events
    comes first is a scheduling detail, not a semantic: give streams subscribed at the same instant
    distinct ``shift_s``)."""
    t, events = shift_s, []
    for item in items:
        t = round(t + step_s * rng.choice((1, 1, 2, 3)), 6)
        events.append((t, item))
    error = SourceFailed(f"timeline error at {t + end_step_s:.4f}") if rng.random() < error_rate else None
    return Timeline(tuple(events), round(t + end_step_s, 6), error)


def rxpipe_timeline(line: Timeline) -> rx.Flowable[Any]:
    """The timeline as an rxpipe source (an async generator sleeping on the loop's clock)."""
    async def play() -> Any:
        t = 0.0
        for at, item in line.events:
            await asyncio.sleep(at - t)
            t = at
            yield item
        await asyncio.sleep(line.end_s - t)
        if line.error is not None:
            raise line.error

    return rx.defer(lambda: rx.from_async_iterable(play()))


def reactivex_timeline(line: Timeline) -> reactivex.Observable[Any]:
    """The timeline as a reactivex source (timers in sequence, on the scheduler it is subscribed
    with: :func:`timed_through_reactivex`'s ``TestScheduler``)."""
    parts: list[reactivex.Observable[Any]] = []
    t = 0.0
    for at, item in line.events:
        parts.append(reactivex.timer(at - t).pipe(rxo.map(lambda _, item=item: item)))
        t = at
    parts.append(reactivex.timer(line.end_s - t).pipe(rxo.ignore_elements()))
    if line.error is not None:
        parts.append(reactivex.throw(line.error))
    return reactivex.concat(*parts)
