"""The first round's operators against reactivex 6.1, through the differential harness: equal
notifications (values, order, terminal signal) under unbounded demand, on seeded inputs."""

from __future__ import annotations

import zlib
from typing import Any, Callable

import pytest
import reactivex.operators as rxo

from rxpipe import operators as ops

from .differential import cases, through_reactivex, through_rxpipe


def _fails_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError("seven")
    return x * 2


#: name -> (rxpipe operator, reactivex operator), same arguments
PAIRS: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
    "map": (lambda: ops.map(lambda x: x + 1), lambda: rxo.map(lambda x: x + 1)),
    "map_raising": (lambda: ops.map(_fails_on_seven), lambda: rxo.map(_fails_on_seven)),
    "filter": (lambda: ops.filter(lambda x: x % 3), lambda: rxo.filter(lambda x: x % 3)),
    "scan": (lambda: ops.scan(lambda a, x: a + x, 0), lambda: rxo.scan(lambda a, x: a + x, 0)),
    "take": (lambda: ops.take(3), lambda: rxo.take(3)),
    "take_0": (lambda: ops.take(0), lambda: rxo.take(0)),
    "skip": (lambda: ops.skip(2), lambda: rxo.skip(2)),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_equal_to_reactivex_on_every_seeded_input(name: str) -> None:
    ours, theirs = PAIRS[name]
    for case in cases(seed=zlib.crc32(name.encode()), count=12):
        expected = through_reactivex(lambda s: s.pipe(theirs()), case)
        assert through_rxpipe(lambda s: s.pipe(ours()), case) == expected, case
