"""zip, combine_latest, with_latest_from, concat and the static rx.zip / rx.merge / rx.concat /
rx.combine_latest: against reactivex 6.1, and their demand bounds.

Differential (tests/operators/differential.py), under unbounded demand, each seeded input as the
source or as the other source, with a fixed synchronous partner:

- every input that ends in completion gives exactly reactivex's notifications; one that ends in
  an error is compared exactly where the order of two synchronous events is not a scheduling
  artifact (reactivex runs ``concat(items, throw(e))``'s error after the actions already queued
  on its trampoline, where rxpipe meets it when it asks for the item after the last); elsewhere
  rxpipe's notifications end with the input's error (an error is never lost to a completion),
  or are reactivex's (the stream ended before reaching it);
- on virtual time (``timed_cases`` against a timed other source, reactivex's ``TestScheduler``)
  every input, errors included, gives exactly reactivex's timed notifications — except that
  ``combine_latest`` completes as soon as a source completes without ever emitting (reactivex
  waits for the others there; the notifications are the same, the completion comes earlier),
  which is asserted as such.
"""

from __future__ import annotations

import random
import zlib
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, run_virtual

from .differential import (
    cases,
    note_of_error,
    reactivex_timeline,
    rxpipe_timeline,
    through_reactivex,
    through_rxpipe,
    timed_cases,
    timed_through_reactivex,
    timed_through_rxpipe,
    timeline,
)

FIXED = ("p", "q", "r", "s", "t")


def _as_source(ours: Callable[..., Any], theirs: Callable[..., Any]) -> tuple[Any, Any]:
    """The operator with the seeded input as its source and FIXED as the other."""
    return (lambda: ours(rx.from_iterable(FIXED)), lambda: theirs(reactivex.from_iterable(FIXED)))


def _as_other(ours: Callable[..., Any], theirs: Callable[..., Any]) -> tuple[Any, Any]:
    """The operator with FIXED as its source and the seeded input as the other."""
    return (lambda: lambda s: rx.from_iterable(FIXED).pipe(ours(s)),
            lambda: lambda s: reactivex.from_iterable(FIXED).pipe(theirs(s)))


def _wide(op: Callable[..., Any]) -> Callable[..., Any]:
    """``op`` with a prefetch above any seeded input's length: combine_latest over a synchronous
    source longer than its prefetch alternates with the other source by request rounds (32 items
    of one, then of the other), where reactivex takes each synchronous source whole."""
    return lambda *others: op(*others, prefetch=256)


#: name -> (rxpipe operator, reactivex operator, errors compared exactly)
PAIRS: dict[str, tuple[Callable[[], Any], Callable[[], Any], bool]] = {
    "zip_source": (*_as_source(ops.zip, rxo.zip), False),
    "zip_other": (*_as_other(ops.zip, rxo.zip), True),
    "zip_prefetch_2": (lambda: ops.zip(rx.range(0, 500), prefetch=2), lambda: rxo.zip(reactivex.range(0, 500)), False),
    "combine_latest_source": (*_as_source(_wide(ops.combine_latest), rxo.combine_latest), False),
    "combine_latest_other": (*_as_other(ops.combine_latest, rxo.combine_latest), True),
    "with_latest_from_source": (*_as_source(ops.with_latest_from, rxo.with_latest_from), True),
    "with_latest_from_other": (*_as_other(ops.with_latest_from, rxo.with_latest_from), False),
    "with_latest_from_none": (ops.with_latest_from, rxo.with_latest_from, True),
    "concat_source": (*_as_source(ops.concat, rxo.concat), True),
    "concat_other": (*_as_other(ops.concat, rxo.concat), True),
    "concat_three": (lambda: ops.concat(rx.empty(), rx.just(-1)),
                     lambda: rxo.concat(reactivex.empty(), reactivex.of(-1)), True),
    "rx_zip": (lambda: lambda s: rx.zip(s, rx.from_iterable(FIXED), s),
               lambda: lambda s: reactivex.zip(s, reactivex.from_iterable(FIXED), s), False),
    "rx_merge": (lambda: lambda s: rx.merge(rx.from_iterable(FIXED), s),
                 lambda: lambda s: reactivex.merge(reactivex.from_iterable(FIXED), s), True),
    "rx_concat": (lambda: lambda s: rx.concat(s, rx.from_iterable(FIXED), s),
                  lambda: lambda s: reactivex.concat(s, reactivex.from_iterable(FIXED), s), True),
    "rx_combine_latest": (lambda: lambda s: rx.combine_latest(rx.from_iterable(FIXED), s),
                          lambda: lambda s: reactivex.combine_latest(reactivex.from_iterable(FIXED), s), True),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_equal_to_reactivex_on_every_seeded_input(name: str) -> None:
    ours, theirs, errors_compare = PAIRS[name]
    for case in cases(seed=zlib.crc32(name.encode()), count=12):
        got = through_rxpipe(lambda s: s.pipe(ours()), case)
        expected = through_reactivex(lambda s: s.pipe(theirs()), case)
        if case.error is None or errors_compare:
            assert got == expected, case
        else:  # the input's error is never lost (unless the stream ended before reaching it, as reactivex's)
            assert got[-1] == note_of_error(case.error) or got == expected, case


def _other(case_index: int, seed: int) -> Any:
    rng = random.Random(f"{seed}:{case_index}")
    return timeline(rng, [chr(97 + k) for k in range(rng.randint(0, 6))], error_rate=0.3)


#: name -> (rxpipe build, reactivex build), given the timed other source
TIMED: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "zip": (lambda o: ops.zip(rxpipe_timeline(o)), lambda o: rxo.zip(reactivex_timeline(o))),
    "combine_latest": (lambda o: ops.combine_latest(rxpipe_timeline(o)),
                       lambda o: rxo.combine_latest(reactivex_timeline(o))),
    "with_latest_from": (lambda o: ops.with_latest_from(rxpipe_timeline(o)),
                         lambda o: rxo.with_latest_from(reactivex_timeline(o))),
    "concat": (lambda o: ops.concat(rxpipe_timeline(o)), lambda o: rxo.concat(reactivex_timeline(o))),
    "rx_zip": (lambda o: lambda s: rx.zip(rxpipe_timeline(o), s),
               lambda o: lambda s: reactivex.zip(reactivex_timeline(o), s)),
    "rx_merge": (lambda o: lambda s: rx.merge(s, rxpipe_timeline(o)),
                 lambda o: lambda s: reactivex.merge(s, reactivex_timeline(o))),
    "rx_concat": (lambda o: lambda s: rx.concat(s, rxpipe_timeline(o)),
                  lambda o: lambda s: reactivex.concat(s, reactivex_timeline(o))),
    "rx_combine_latest": (lambda o: lambda s: rx.combine_latest(rxpipe_timeline(o), s),
                          lambda o: lambda s: reactivex.combine_latest(reactivex_timeline(o), s)),
}


@pytest.mark.parametrize("name", sorted(TIMED))
def test_equal_to_reactivex_on_virtual_time_with_a_timed_other_source(name: str) -> None:
    ours, theirs = TIMED[name]
    seed = zlib.crc32(name.encode())
    for index, case in enumerate(timed_cases(seed=seed, count=12)):
        other = _other(index, seed)
        got = timed_through_rxpipe(lambda s, other=other: s.pipe(ours(other)), case)
        expected = timed_through_reactivex(lambda s, other=other: s.pipe(theirs(other)), case)
        assert got == expected, (case, other)  # combine_latest too: a source ending empty ends nothing


# -- zip ---------------------------------------------------------------------------------------------------
def test_zip_requests_prefetch_from_each_source_then_75_percent() -> None:
    a, b = TestPublisher[int](), TestPublisher[str]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    a.pipe(ops.zip(b, prefetch=8)).subscribe(ts)
    assert a.requests == [8] and b.requests == [8]
    for k in range(6):
        a.emit(k)
        b.emit(str(k))
    assert a.requests == [8, 6] and b.requests == [8, 6]  # 6 = 8 - 8 // 4 tuples went out
    assert ts.values == [(k, str(k)) for k in range(6)]


def test_zip_a_fast_source_never_has_more_than_prefetch_waiting() -> None:
    a, b = TestPublisher[int](), TestPublisher[str]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    a.pipe(ops.zip(b, prefetch=4)).subscribe(ts)
    a.emit(1, 2, 3, 4)
    assert a.requests == [4] and a.outstanding == 0  # waits for b's partners
    a.emit(5)
    assert isinstance(ts.error, MissingBackpressureError) and b.cancelled


def test_zip_emits_tuples_only_on_demand() -> None:
    a, b = TestPublisher[int](), TestPublisher[str]()
    ts = TestSubscriber[Any]()
    a.pipe(ops.zip(b)).subscribe(ts)
    a.emit(1, 2)
    b.emit("x", "y")
    assert ts.values == []
    ts.request(1)
    assert ts.values == [(1, "x")]
    ts.request(5)
    assert ts.values == [(1, "x"), (2, "y")]


def test_zip_completes_when_a_completed_source_has_nothing_left_and_cancels_the_others() -> None:
    a, b, c = TestPublisher[int](), TestPublisher[str](), TestPublisher[str]()
    ts = TestSubscriber[Any]()
    a.pipe(ops.zip(b, c)).subscribe(ts)
    a.emit(1, 2)
    a.complete()
    b.emit("x", "y", "z")
    c.emit("p")
    assert not ts.completed
    ts.request(1)
    assert ts.values == [(1, "x", "p")] and not ts.completed  # a has 2 left: c may still pair it
    c.emit("q")
    ts.request(1)
    assert ts.values == [(1, "x", "p"), (2, "y", "q")] and ts.completed
    assert b.cancelled and c.cancelled and not a.cancelled


def test_zip_of_an_empty_source_completes_at_once_without_demand() -> None:
    b = TestPublisher[str]()
    ts = TestSubscriber[Any]()
    rx.empty().pipe(ops.zip(b)).subscribe(ts)
    assert ts.completed and b.cancelled


@pytest.mark.parametrize("operator", ["zip", "combine_latest", "with_latest_from"])
def test_an_error_from_any_source_cancels_the_others(operator: str) -> None:
    for failing in range(3):
        sources = [TestPublisher[int]() for _ in range(3)]
        ts = TestSubscriber[Any](initial_request=UNBOUNDED)
        sources[0].pipe(getattr(ops, operator)(*sources[1:])).subscribe(ts)
        failure = RuntimeError(f"source {failing}")
        sources[failing].error(failure)
        assert ts.error is failure
        assert all(s.cancelled for k, s in enumerate(sources) if k != failing)


@pytest.mark.parametrize("operator", ["zip", "combine_latest", "with_latest_from", "concat"])
def test_cancel_reaches_every_subscribed_source(operator: str) -> None:
    sources = [TestPublisher[int]() for _ in range(3)]
    ts = TestSubscriber[Any](initial_request=1)
    sources[0].pipe(getattr(ops, operator)(*sources[1:])).subscribe(ts)
    ts.cancel()
    subscribed = sources[:1] if operator == "concat" else sources
    assert all(s.cancelled for s in subscribed)
    if operator == "concat":
        assert [s.subscribe_count for s in sources] == [1, 0, 0]


@pytest.mark.parametrize("seed", range(6))
def test_zip_random_demand_never_exceeded_and_each_source_within_its_prefetch(seed: int) -> None:
    rng = random.Random(seed)
    prefetch = rng.choice((1, 3, 8))
    sources = [TestPublisher[int]() for _ in range(3)]
    ts = TestSubscriber[Any]()
    sources[0].pipe(ops.zip(*sources[1:], prefetch=prefetch)).subscribe(ts)
    sent, requested = [0, 0, 0], 0
    for _ in range(500):
        if rng.random() < 0.25:
            n = rng.choice((1, 2, 5))
            requested += n
            ts.request(n)
        else:
            k = rng.randrange(3)
            if sources[k].outstanding:
                sources[k].emit(sent[k])
                sent[k] += 1
        assert len(ts.values) <= requested and ts.error is None
        for source in sources:
            assert source.total_requested - len(ts.values) <= prefetch  # outstanding + waiting
    assert ts.values == [(k, k, k) for k in range(len(ts.values))] and len(ts.values) > 20


# -- combine_latest -------------------------------------------------------------------------------------
def test_combine_latest_emits_on_each_arrival_once_every_source_has_a_value() -> None:
    a, b = TestPublisher[str](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    a.pipe(ops.combine_latest(b)).subscribe(ts)
    a.emit("a", "b")  # no tuple yet: only the latest counts
    b.emit(1)
    a.emit("c")
    b.emit(2)
    assert ts.values == [("b", 1), ("c", 1), ("c", 2)]


def test_combine_latest_tuples_wait_for_demand_in_order_within_each_prefetch() -> None:
    a, b = TestPublisher[str](), TestPublisher[int]()
    ts = TestSubscriber[Any]()
    a.pipe(ops.combine_latest(b, prefetch=4)).subscribe(ts)
    a.emit("a")
    b.emit(1, 2)
    a.emit("b")
    assert ts.values == [] and a.requests == [4] and b.requests == [4]
    ts.request(2)
    assert ts.values == [("a", 1), ("a", 2)]
    ts.request(1)
    assert ts.values == [("a", 1), ("a", 2), ("b", 2)]
    b.emit(3, 4)  # ("b", 3), ("b", 4) wait for demand: 2 of b's 4 free, less than a round (3)
    assert b.requests == [4] and b.outstanding == 0 and ts.values[-1] == ("b", 2)
    ts.request(2)  # nothing waits, nothing outstanding: b's whole window again
    assert ts.values[-2:] == [("b", 3), ("b", 4)] and b.requests == [4, 4]
    b.emit(5, 6, 7, 8)  # 4 tuples wait: b's whole prefetch
    assert b.outstanding == 0 and ts.values[-1] == ("b", 4)
    b.emit(9)
    assert isinstance(ts.error, MissingBackpressureError) and a.cancelled


def test_combine_latest_waits_for_every_source_when_one_ends_without_a_value() -> None:
    # reactivex completes only once every source completed (DESIGN §3, the kit's third round);
    # before issue 33 it completed at once here, as Reactor does
    a, b = TestPublisher[str](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    a.pipe(ops.combine_latest(b)).subscribe(ts)
    a.emit("a")
    b.complete()
    assert not ts.done and not a.cancelled
    a.complete()
    assert ts.completed and ts.values == []
    a, b = TestPublisher[str](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    a.pipe(ops.combine_latest(b)).subscribe(ts)
    b.complete()
    a.emit("a")  # the last source running emits, and no tuple can come: reactivex completes here
    assert ts.completed and a.cancelled and ts.values == []


def test_combine_latest_completes_when_every_source_completed() -> None:
    a, b = TestPublisher[str](), TestPublisher[int]()
    ts = TestSubscriber[Any]()
    a.pipe(ops.combine_latest(b)).subscribe(ts)
    a.emit("a").complete()
    b.emit(1, 2).complete()
    assert not ts.completed
    ts.request(5)
    assert ts.values == [("a", 1), ("a", 2)] and ts.completed


# -- with_latest_from ---------------------------------------------------------------------------------
def test_with_latest_from_passes_demand_through_and_asks_again_for_items_without_partners() -> None:
    source, other = TestPublisher[str](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=2)
    source.pipe(ops.with_latest_from(other)).subscribe(ts)
    assert other.requests == [UNBOUNDED] and source.requests == [2]
    source.emit("a")  # no partner yet: dropped, one more asked
    assert source.requests == [2, 1]
    other.emit(1, 2, 3)  # only the latest is kept
    source.emit("b", "c")
    assert ts.values == [("b", 3), ("c", 3)] and source.outstanding == 0


def test_with_latest_from_other_completing_keeps_its_value_and_source_completion_ends() -> None:
    source, other = TestPublisher[str](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    source.pipe(ops.with_latest_from(other)).subscribe(ts)
    other.emit(7).complete()
    source.emit("a")
    source.complete()
    assert ts.values == [("a", 7)] and ts.completed


def test_with_latest_from_never_stalls_under_request_1_over_a_long_run_without_partners() -> None:
    other = TestPublisher[str]()
    source = rx.range(0, 5000)
    ts = TestSubscriber[Any](initial_request=1)
    source.pipe(ops.with_latest_from(other)).subscribe(ts)
    assert ts.completed and ts.values == []  # 5000 items dropped one at a time, each asked again
    assert other.cancelled


def test_with_latest_from_meets_a_synchronous_others_values() -> None:
    out = run_virtual(rx.range(0, 3).pipe(ops.with_latest_from(rx.just("x", "y"), rx.just(1))).to_list())
    assert out == [(0, "y", 1), (1, "y", 1), (2, "y", 1)]


# -- concat ------------------------------------------------------------------------------------------------
def test_concat_subscribes_one_source_at_a_time_carrying_the_demand_over() -> None:
    a, b, c = TestPublisher[int](), TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=5)
    a.pipe(ops.concat(b, c)).subscribe(ts)
    assert [s.subscribe_count for s in (a, b, c)] == [1, 0, 0] and a.requests == [5]
    a.emit(1, 2).complete()
    assert [s.subscribe_count for s in (a, b, c)] == [1, 1, 0] and b.requests == [3]
    b.emit(3).complete()
    assert [s.subscribe_count for s in (a, b, c)] == [1, 1, 1] and c.requests == [2]
    ts.request(10)
    assert c.requests == [2, 10]
    c.emit(4).complete()
    assert ts.values == [1, 2, 3, 4] and ts.completed


def test_concat_an_error_stops_before_the_sources_after_it() -> None:
    a, b = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[Any](initial_request=UNBOUNDED)
    a.pipe(ops.concat(b)).subscribe(ts)
    failure = RuntimeError("a failed")
    a.error(failure)
    assert ts.error is failure and b.subscribe_count == 0


def test_concat_never_stalls_under_request_1_over_empty_sources() -> None:
    ts = TestSubscriber[int]()
    rx.just(1).pipe(ops.concat(*[rx.empty() for _ in range(500)], rx.just(2))).subscribe(ts)
    ts.request(1)
    ts.request(1)
    assert ts.values == [1, 2] and ts.completed


def test_the_graph_lists_the_other_sources() -> None:
    a, b, c = rx.range(0, 3), rx.just(1), rx.just(2)
    for op in (ops.zip, ops.combine_latest, ops.with_latest_from, ops.concat):
        node = a.pipe(op(b, c))
        assert node.upstreams == (a, b, c)
    assert [s.kind for s in rx.Pipeline(rx.zip(a, b)).stages] == ["range", "just", "zip"]


# -- the static forms ---------------------------------------------------------------------------------
def test_static_forms_are_their_operator_over_the_first_source() -> None:
    async def main() -> None:
        a, b, c = rx.just(1, 2, 3), rx.just("x", "y"), rx.just(True)
        assert await rx.zip(a, b, c).to_list() == [(1, "x", True)]
        assert await rx.zip(a).to_list() == [(1,), (2,), (3,)]
        assert await rx.merge(a, b).to_list() == [1, 2, 3, "x", "y"]
        assert await rx.concat(b, a, b).to_list() == ["x", "y", 1, 2, 3, "x", "y"]
        assert await rx.combine_latest(a, b).to_list() == [(3, "x"), (3, "y")]
        for empty in (rx.zip(), rx.merge(), rx.concat()):
            assert await empty.to_list() == []
        assert rx.zip(a, b, name="pairs").name == "pairs" and rx.zip(a, b).kind == "zip"

    run_virtual(main())


def test_static_forms_and_operators_reject_bad_arguments() -> None:
    for make in (rx.zip, rx.merge, rx.concat, rx.combine_latest):
        with pytest.raises(TypeError, match="Flowable"):
            make(rx.just(1), [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one source"):
        rx.combine_latest()
    with pytest.raises(ValueError, match="prefetch"):
        rx.zip(rx.just(1), rx.just(2), prefetch=0)
    for op in (ops.zip, ops.combine_latest, ops.with_latest_from, ops.concat):
        with pytest.raises(TypeError, match="Flowable"):
            op(reactivex.of(1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefetch"):
        ops.combine_latest(rx.just(1), prefetch=0)


def test_the_core_does_not_import_operators_for_the_static_forms() -> None:
    import subprocess
    import sys

    code = ("import sys, rxpipe; "
            "print(sorted(m for m in sys.modules if m.startswith(('operators', 'rxpipe.operators'))))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout == "[]\n"
