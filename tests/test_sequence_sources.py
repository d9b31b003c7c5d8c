"""rx.catch, rx.catch_with_iterable, rx.concat_with_iterable, rx.for_in and the static
rx.with_latest_from / rx.zip_latest (DESIGN §3, "The kit, third round"): what reactivex 6.1 emits
on seeded inputs, and each one's demand rule.

Differential (tests/operators/differential.py): the sequential ones on 120 seeded lists of cold
sources (each a few items, half ending in an error), under unbounded demand, compared exactly
(reactivex runs them one after another on its trampoline, as rxpipe does); with_latest_from and
zip_latest on virtual time (120 timed inputs against a timed other source, reactivex's
``TestScheduler``), where the order of two synchronous sources is no scheduling artifact.
"""

from __future__ import annotations

import inspect
import random
import sys
import zlib
from typing import Any, Callable, Iterator

import pytest
import reactivex

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, check_operator, run_virtual

from .operators.differential import (
    Case,
    reactivex_source,
    reactivex_timeline,
    rxpipe_source,
    rxpipe_timeline,
    through_reactivex,
    through_rxpipe,
    timed_cases,
    timed_through_reactivex,
    timed_through_rxpipe,
    timeline,
)

SEEDS = 120
NONE = Case(())


class Failed(Exception):
    """A seeded source's error."""


def _sources(seed: int) -> list[Case]:
    rng = random.Random(seed)
    return [
        Case(
            tuple(rng.randint(0, 9) for _ in range(rng.choice((0, 1, 2, 3, 8)))),
            Failed(f"source {k} of seed {seed}") if rng.random() < 0.5 else None,
        )
        for k in range(rng.choice((0, 1, 2, 3, 5)))
    ]


def _mapper_raising_at(seed: int) -> Callable[[Case], Any]:
    """for_in's mapper: a source per case, raising at the value ``seed % 4`` (if there is one)."""

    def mapper(case: Case) -> Any:
        if case.items[:1] == (seed % 4,):
            raise Failed(f"mapper at {case!r}")
        return case

    return mapper


def _gen(xs: list[Any]) -> Iterator[Any]:
    yield from xs


#: name -> (rxpipe source, reactivex source), each given the seeded list of cases
SEQUENTIAL: dict[str, tuple[Callable[[list[Case]], Any], Callable[[list[Case]], Any]]] = {
    "catch": (lambda cs: rx.catch(*map(rxpipe_source, cs)), lambda cs: reactivex.catch(*map(reactivex_source, cs))),
    "catch_with_iterable": (
        lambda cs: rx.catch_with_iterable([rxpipe_source(c) for c in cs]),
        lambda cs: reactivex.catch_with_iterable([reactivex_source(c) for c in cs]),
    ),
    "catch_with_iterable_generator": (
        lambda cs: rx.catch_with_iterable(rxpipe_source(c) for c in cs),
        lambda cs: reactivex.catch_with_iterable(reactivex_source(c) for c in cs),
    ),
    "concat_with_iterable": (
        lambda cs: rx.concat_with_iterable([rxpipe_source(c) for c in cs]),
        lambda cs: reactivex.concat_with_iterable([reactivex_source(c) for c in cs]),
    ),
    "concat_with_iterable_generator": (
        lambda cs: rx.concat_with_iterable(rxpipe_source(c) for c in cs),
        lambda cs: reactivex.concat_with_iterable(reactivex_source(c) for c in cs),
    ),
    "for_in": (lambda cs: rx.for_in(cs, rxpipe_source), lambda cs: reactivex.for_in(cs, reactivex_source)),
}


@pytest.mark.parametrize("name", sorted(SEQUENTIAL))
def test_equal_to_reactivex_on_every_seeded_list_of_sources(name: str) -> None:
    ours, theirs = SEQUENTIAL[name]
    base = zlib.crc32(name.encode())
    for seed in range(base, base + SEEDS):
        sources = _sources(seed)
        got = through_rxpipe(lambda _, cs=sources: ours(cs), NONE)
        assert got == through_reactivex(lambda _, cs=sources: theirs(cs), NONE), sources


def test_for_in_equal_to_reactivex_when_the_mapper_raises() -> None:
    for seed in range(SEEDS):
        sources, mapper = _sources(seed), _mapper_raising_at(seed)
        got = through_rxpipe(lambda _, cs=sources, m=mapper: rx.for_in(cs, lambda c: rxpipe_source(m(c))), NONE)
        expected = through_reactivex(
            lambda _, cs=sources, m=mapper: reactivex.for_in(cs, lambda c: reactivex_source(m(c))), NONE
        )
        assert got == expected, sources


def _other(index: int, seed: int) -> Any:
    rng = random.Random(f"{seed}:{index}")
    return timeline(rng, [chr(97 + k) for k in range(rng.randint(0, 6))], error_rate=0.3)


#: name -> (rxpipe build, reactivex build), given the timed other source
TIMED: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    # the source (driven by timed_through_*) first: it cannot be subscribed twice
    "catch": (
        lambda o: lambda s: rx.catch(s, rxpipe_timeline(o)),
        lambda o: lambda s: reactivex.catch(s, reactivex_timeline(o)),
    ),
    "concat_with_iterable": (
        lambda o: lambda s: rx.concat_with_iterable(iter([s, rxpipe_timeline(o)])),
        lambda o: lambda s: reactivex.concat_with_iterable(iter([s, reactivex_timeline(o)])),
    ),
    "for_in": (
        lambda o: lambda s: rx.for_in([s, o], lambda x: x if isinstance(x, rx.Flowable) else rxpipe_timeline(x)),
        lambda o: (
            lambda s: reactivex.for_in(
                [s, o], lambda x: x if isinstance(x, reactivex.Observable) else reactivex_timeline(x)
            )
        ),
    ),
    "with_latest_from": (
        lambda o: lambda s: rx.with_latest_from(s, rxpipe_timeline(o)),
        lambda o: lambda s: reactivex.with_latest_from(s, reactivex_timeline(o)),
    ),
    "with_latest_from_other_first": (
        lambda o: lambda s: rx.with_latest_from(rxpipe_timeline(o), s),
        lambda o: lambda s: reactivex.with_latest_from(reactivex_timeline(o), s),
    ),
    "zip_latest": (
        lambda o: lambda s: rx.zip_latest(s, rxpipe_timeline(o)),
        lambda o: lambda s: reactivex.zip_latest(s, reactivex_timeline(o)),
    ),
    "zip_latest_three": (
        lambda o: lambda s: rx.zip_latest(rxpipe_timeline(o), s, rxpipe_timeline(o)),
        lambda o: lambda s: reactivex.zip_latest(reactivex_timeline(o), s, reactivex_timeline(o)),
    ),
}


@pytest.mark.parametrize("name", sorted(TIMED))
def test_equal_to_reactivex_on_virtual_time(name: str) -> None:
    ours, theirs = TIMED[name]
    seed = zlib.crc32(name.encode())
    for index, case in enumerate(timed_cases(seed=seed, count=SEEDS)):
        other = _other(index, seed)
        got = timed_through_rxpipe(ours(other), case)
        assert got == timed_through_reactivex(theirs(other), case), (case, other)


def test_the_static_forms_are_their_operators_on_the_first_source() -> None:
    assert run_virtual(rx.with_latest_from(rx.of(1, 2)).to_list()) == [(1,), (2,)]  # reactivex: 1-tuples
    assert run_virtual(rx.with_latest_from(rx.of(1, 2), rx.of("a"), rx.of("x", "y")).to_list()) == [
        (1, "a", "y"),
        (2, "a", "y"),
    ]
    assert run_virtual(rx.zip_latest(rx.of(1, 2), rx.of("a", "b")).to_list()) == [(2, "a")]
    pubs = [TestPublisher[int]() for _ in range(2)]
    rx.zip_latest(*pubs, prefetch=4).subscribe(TestSubscriber[Any](initial_request=1))
    assert [p.requests for p in pubs] == [[4], [4]]
    with pytest.raises(TypeError, match="at least one source"):
        rx.with_latest_from()
    with pytest.raises(ValueError, match="at least one source"):
        rx.zip_latest()
    with pytest.raises(TypeError, match="Flowables"):
        rx.zip_latest(rx.of(1), [2])  # type: ignore[arg-type]


NEW = (
    "catch",
    "catch_with_iterable",
    "concat_with_iterable",
    "for_in",
    "with_latest_from",
    "zip_latest",
    "generate_with_relative_time",
    "start_async",
    "from_callback",
    "to_async",
)


@pytest.mark.parametrize("name", NEW)
def test_reactivex_argument_order_and_names(name: str) -> None:
    theirs = [p for p in inspect.signature(getattr(reactivex, name)).parameters.values()]
    ours = [p for p in inspect.signature(getattr(rx, name)).parameters.values() if p.kind is not p.KEYWORD_ONLY]
    assert [(p.name, p.kind) for p in ours[: len(theirs)]] == [(p.name, p.kind) for p in theirs]


# -- demand ------------------------------------------------------------------------------------------
SEQUENTIAL_PUBS: dict[str, Callable[[list[TestPublisher[int]]], rx.Flowable[int]]] = {
    "catch": lambda pubs: rx.catch(*pubs),
    "catch_with_iterable": lambda pubs: rx.catch_with_iterable(iter(pubs)),
    "concat_with_iterable": lambda pubs: rx.concat_with_iterable(iter(pubs)),
    "for_in": lambda pubs: rx.for_in(range(len(pubs)), pubs.__getitem__),
}


def _end(name: str, pub: TestPublisher[int]) -> None:
    """End ``pub`` so that the next source follows: an error for catch, a completion for concat."""
    if name.startswith("catch"):
        pub.error(RuntimeError("ended"))
    else:
        pub.complete()


@pytest.mark.parametrize("name", sorted(SEQUENTIAL_PUBS))
def test_the_current_source_is_asked_exactly_the_outstanding_demand(name: str) -> None:
    pubs = [TestPublisher[int]() for _ in range(3)]
    ts = TestSubscriber[int](initial_request=5)
    SEQUENTIAL_PUBS[name](pubs).subscribe(ts)
    assert [p.requests for p in pubs] == [[5], [], []]  # one source at a time: the next not yet subscribed
    ts.request(2)
    assert pubs[0].requests == [5, 2]
    pubs[0].emit(1, 2, 3)
    _end(name, pubs[0])
    assert pubs[1].requests == [4]  # 7 asked, 3 delivered: only the 4 still owed
    pubs[1].emit(4)
    ts.request(1)
    assert pubs[1].requests == [4, 1]
    pubs[1].emit(5, 6, 7, 8)
    assert ts.values == [1, 2, 3, 4, 5, 6, 7, 8] and pubs[1].outstanding == 0
    _end(name, pubs[1])
    assert pubs[2].requests == []  # nothing owed: nothing asked
    ts.request(3)
    assert pubs[2].requests == [3]
    pubs[2].emit(9).complete()
    assert ts.values == [1, 2, 3, 4, 5, 6, 7, 8, 9] and ts.completed


@pytest.mark.parametrize("name", sorted(SEQUENTIAL_PUBS))
def test_cancel_reaches_the_current_source_only(name: str) -> None:
    pubs = [TestPublisher[int]() for _ in range(3)]
    ts = TestSubscriber[int](initial_request=2)
    SEQUENTIAL_PUBS[name](pubs).subscribe(ts)
    _end(name, pubs[0])
    assert pubs[1].requests == [2]
    ts.cancel()
    assert pubs[1].cancelled and not pubs[0].cancelled and pubs[2].requests == [] and not pubs[2].cancelled
    ts.cancel()  # idempotent
    assert ts.values == [] and not ts.done


def test_the_iterable_is_read_lazily_one_source_after_the_one_before_ended() -> None:
    taken: list[int] = []
    pubs = [TestPublisher[int]() for _ in range(3)]

    def sources() -> Iterator[TestPublisher[int]]:
        for k, pub in enumerate(pubs):
            taken.append(k)
            yield pub

    ts = TestSubscriber[int](initial_request=UNBOUNDED)
    rx.concat_with_iterable(sources()).subscribe(ts)
    assert taken == [0]
    pubs[0].emit(1).complete()
    assert taken == [0, 1]
    endless = rx.concat_with_iterable(rx.of(k) for k in range(10**9))  # an endless supply is fine
    assert run_virtual(endless.pipe(ops.take(4)).to_list()) == [0, 1, 2, 3]
    mapped: list[int] = []
    ts = TestSubscriber[int](initial_request=1)
    rx.for_in(range(5), lambda v: mapped.append(v) or rx.of(v)).subscribe(ts)  # type: ignore[func-returns-value]
    assert mapped == [0, 1] and ts.values == [0]  # 1's stream is made (0 ended), asked nothing yet


def test_a_list_replays_per_subscription_a_generator_serves_the_first() -> None:
    listed = rx.catch_with_iterable([rx.throw(ValueError("a")), rx.of(1, 2)])
    assert run_virtual(listed.to_list()) == [1, 2] == run_virtual(listed.to_list())
    generated = rx.concat_with_iterable(x for x in [rx.of(1), rx.of(2)])
    assert run_virtual(generated.to_list()) == [1, 2]
    assert run_virtual(generated.to_list()) == []  # as reactivex: the generator is spent
    values = rx.for_in([1, 2], lambda v: rx.of(v, v * 10))
    assert run_virtual(values.to_list()) == [1, 10, 2, 20] == run_virtual(values.to_list())  # reactivex: [] again


def test_many_synchronous_sources_never_recurse() -> None:
    n = 20_000
    assert sys.getrecursionlimit() < n
    assert run_virtual(rx.concat_with_iterable(rx.of(k) for k in range(n)).to_list()) == list(range(n))
    assert run_virtual(rx.concat_with_iterable(rx.empty() for _ in range(n)).to_list()) == []
    failing = rx.catch_with_iterable(rx.throw(ValueError(str(k))) for k in range(n))
    with pytest.raises(ValueError, match=str(n - 1)):
        run_virtual(failing.to_list())  # every source failed: the last error


#: the functions with the checked source in the place of one of their sources (rxpipe.testing's contract)
CONTRACT: dict[str, Callable[[], Callable[[rx.Flowable[Any]], rx.Flowable[Any]]]] = {
    "catch": lambda: lambda s: rx.catch(rx.throw(ValueError("x")), s),
    "catch_with_iterable": lambda: lambda s: rx.catch_with_iterable([s]),
    "concat_with_iterable": lambda: lambda s: rx.concat_with_iterable([rx.empty(), s, rx.empty()]),
    "for_in": lambda: lambda s: rx.for_in([s], lambda x: x),
    "with_latest_from": lambda: lambda s: rx.with_latest_from(s, rx.of("x")),
    "zip_latest": lambda: lambda s: rx.zip_latest(s),
}


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_the_contract_checks_hold(name: str) -> None:
    check_operator(CONTRACT[name])


# -- errors -------------------------------------------------------------------------------------------
def test_errors() -> None:
    with pytest.raises(TypeError, match="Flowables"):
        rx.catch(rx.of(1), [2])  # type: ignore[arg-type]
    for make in (rx.catch_with_iterable, rx.concat_with_iterable):
        with pytest.raises(TypeError, match="iterable"):
            make(5)  # type: ignore[arg-type]
        ts = TestSubscriber[Any](initial_request=UNBOUNDED)
        first = rx.throw(ValueError("x")) if make is rx.catch_with_iterable else rx.of(1)
        make([first, 2]).subscribe(ts)  # type: ignore[list-item]
        assert isinstance(ts.error, TypeError) and "source 2 is 2, not a Flowable" in str(ts.error)
    with pytest.raises(TypeError, match="iterable"):
        rx.for_in(5, rx.of)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="mapper"):
        rx.for_in([1], 5)  # type: ignore[arg-type]

    def broken() -> Iterator[Any]:
        yield rx.throw(ValueError("first"))
        raise KeyError("the iterator")

    ts = TestSubscriber[Any](initial_request=1)
    rx.catch_with_iterable(broken()).subscribe(ts)
    assert isinstance(ts.error, KeyError)  # the iterator's own error, as reactivex
    ts = TestSubscriber[Any](initial_request=1)
    rx.concat_with_iterable([rx.of(1, 2), rx.of(3)]).subscribe(ts)
    ts.request(0)
    assert isinstance(ts.error, ValueError)  # §3.9
