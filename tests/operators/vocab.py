"""The third round's differential against reactivex 6.1 (DESIGN §3, "Operators, third round").

Each family's test module registers its operators in :data:`SYNC` (synchronous cold inputs) or
:data:`TIMED` (on virtual time) with :func:`register`; each family runs :func:`check_sync` /
:func:`check_timed` over at least :data:`CASES` seeded inputs per operator, and
``test_differential.py`` checks that every reactivex name rxpipe shares is registered somewhere.

What "equal" allows, and only this (reactivex's side is rewritten, never ours):

- reactivex's exception types where rxpipe signals its own with reactivex's message
  (``ArgumentOutOfRangeException`` → ``ArgumentOutOfRangeError``; a plain ``Exception("Sequence
  contains more than one element")`` → ``SequenceContainsMoreThanOneElementError``; ``Exception("The
  input sequence was empty")`` → ``SequenceContainsNoElementsError``);
- ``none_is_nothing``: an item None (a ``*_or_default`` default) is no item in rxpipe (Reactive
  Streams §2.13), so reactivex's ``("N", None)`` is left out.
"""

from __future__ import annotations

import random
import zlib
from typing import Any, Callable

from .differential import (
    Note,
    cases,
    through_reactivex,
    through_rxpipe,
    timed_cases,
    timed_through_reactivex,
    timed_through_rxpipe,
)

__all__ = ["CASES", "SYNC", "TIMED", "Pair", "register", "register_timed", "alike", "check_sync", "check_timed",
           "check_demand", "seed_of"]

#: seeded inputs per operator (DESIGN §3: at least 100)
CASES = 100

Pair = tuple[Any, Any]
PairFactory = Callable[[random.Random], Pair]

#: name -> (pair factory, none_is_nothing): synchronous cold inputs
SYNC: dict[str, tuple[PairFactory, bool]] = {}
#: name -> (pair factory, none_is_nothing): on virtual time
TIMED: dict[str, tuple[PairFactory, bool]] = {}

_ERRORS = {
    ("ArgumentOutOfRangeException", "Argument out of range"): ("ArgumentOutOfRangeError", "Argument out of range"),
    ("Exception", "Sequence contains more than one element"): ("SequenceContainsMoreThanOneElementError",
                                                               "Sequence contains more than one element"),
    ("Exception", "The input sequence was empty"): ("SequenceContainsNoElementsError", "The input sequence was empty"),
}


def register(name: str, *, none_is_nothing: bool = False) -> Callable[[PairFactory], PairFactory]:
    """Register a pair factory ``rng -> (rxpipe operator, reactivex operator)`` (or builders
    ``source -> stream`` for each side) under the reactivex name it compares."""
    def add(make: PairFactory) -> PairFactory:
        SYNC[name] = (make, none_is_nothing)
        return make
    return add


def register_timed(name: str, *, none_is_nothing: bool = False) -> Callable[[PairFactory], PairFactory]:
    """As :func:`register`, for an operator compared on virtual time."""
    def add(make: PairFactory) -> PairFactory:
        TIMED[name] = (make, none_is_nothing)
        return make
    return add


def alike(note: Note, none_is_nothing: bool = False) -> Note | None:
    """reactivex's note as rxpipe signals it (see the module doc); None: no note in rxpipe."""
    if note[0] == "E":
        return ("E", *_ERRORS.get(note[1:], note[1:]))
    if none_is_nothing and note == ("N", None):
        return None
    return note


def _alike_all(notes: list[Note], none_is_nothing: bool) -> list[Note]:
    return [n for n in (alike(note, none_is_nothing) for note in notes) if n is not None]


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode())


def check_sync(name: str) -> int:
    """Compare ``name`` on :data:`CASES` seeded cold inputs; return how many were compared."""
    make, none_is_nothing = SYNC[name]
    for i, case in enumerate(cases(seed=seed_of(name), count=CASES)):
        ours, theirs = make(random.Random(f"{name}:{i}"))
        expected = _alike_all(through_reactivex(lambda s, op=theirs: s.pipe(op), case), none_is_nothing)
        assert through_rxpipe(lambda s, op=ours: s.pipe(op), case) == expected, (i, case)
    return CASES


def check_timed(name: str) -> int:
    """Compare ``name`` on :data:`CASES` seeded timed inputs (virtual time, every note's time)."""
    make, none_is_nothing = TIMED[name]
    for i, case in enumerate(timed_cases(seed=seed_of(name), count=CASES)):
        ours, theirs = make(random.Random(f"{name}:{i}"))
        expected = [(t, n) for t, note in timed_through_reactivex(lambda s, op=theirs: s.pipe(op), case)
                    for n in [alike(note, none_is_nothing)] if n is not None]
        assert timed_through_rxpipe(lambda s, op=ours: s.pipe(op), case) == expected, (i, case)
    return CASES


def check_demand(name: str, *, runs: int = 6, never_unbounded: bool = False, make: PairFactory | None = None,
                 any_order: bool = False) -> None:
    """``runs`` seeded random ``request(n)`` patterns over a hand-driven upstream
    (``random_demand.drive``: delivered <= requested, never a stall); each run delivers what
    reactivex emits for the same items (``make``: another pair factory than the registered one;
    ``any_order``: the same items and terminal signal, in an order demand may change, for an
    operator interleaving several streams)."""
    from .differential import Case
    from .random_demand import drive
    from .seeded_pairs import notes

    registered, none_is_nothing = SYNC[name]
    make = make or registered
    for seed in range(runs):
        rng = random.Random(f"{name}:demand:{seed}")
        items = [rng.randint(0, 9) for _ in range(rng.choice((0, 1, 5, 40, 150)))]
        ours, theirs = make(rng)
        run = drive(ours, items, seed, never_unbounded=never_unbounded)
        expected = _alike_all(through_reactivex(lambda s, op=theirs: s.pipe(op), Case(tuple(items))), none_is_nothing)
        got = notes(run.ts)
        if any_order:
            got, expected = sorted(got[:-1], key=repr) + got[-1:], sorted(expected[:-1], key=repr) + expected[-1:]
        assert got == expected, (seed, len(items))
