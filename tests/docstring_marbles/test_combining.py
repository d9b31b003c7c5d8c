"""The docstring marble diagrams of the combining operators (operators/_combining.py): merge, zip & co, each played by
its runner (the package docstring says how)."""

from __future__ import annotations

from typing import Callable

import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.testing import Marbles, run_virtual

from .helpers import FOUND, Block, diagram_id, kit, streams, two_sources


def merge(block: Block) -> None:
    async def main() -> None:
        m = Marbles()
        source, other = m.cold(block["source"]), m.cold(block["other"])
        (await m.run(source.pipe(ops.merge(other)), demand=block["demand"])).expect(block["output"])
    run_virtual(main())


_PAIRS = {"w": ("a", 1), "x": ("a", 2), "y": ("b", 2), "z": ("c", 2)}


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.merge", 0): merge,
    ("ops.start_with", 0): kit(lambda: ops.start_with("a", "b")),
    ("ops.zip", 0): streams(lambda s, fn, other: s.pipe(ops.zip(other)), other_requests="^32",
                            values={"x": ("a", 1), "y": ("b", 2), "z": ("c", 3)}),
    ("ops.combine_latest", 0): streams(lambda s, fn, other: s.pipe(ops.combine_latest(other)),
                                       other_requests="^32", values={**_PAIRS, "x": ("a", 2), "w": ("a", 1)}),
    ("ops.with_latest_from", 0): streams(lambda s, fn, other: s.pipe(ops.with_latest_from(other)),
                                         other_requests="^*", values={"x": ("b", 1), "y": ("c", 2)}),
    ("ops.concat", 0): streams(lambda s, fn, other: s.pipe(ops.concat(other)), other_requests="    ^1  ^9",
                               subscribed_later=True),
    ("ops.amb", 0): two_sources(lambda source, other: source.pipe(ops.amb(other))),
    ("ops.zip_latest", 0): two_sources(lambda source, other: source.pipe(ops.zip_latest(other)),
                                       values={"x": ("a", 1), "y": ("c", 2)}),
    ("ops.zip_with_iterable", 0): kit(lambda: ops.zip_with_iterable([1, 2]), values={"x": ("a", 1), "y": ("b", 2)}),
    ("ops.zip_with_list", 0): kit(lambda: ops.zip_with_list([1, 2]), values={"x": ("a", 1), "y": ("b", 2)}),
    ("ops.join", 0): two_sources(lambda source, other: source.pipe(ops.join(
        other, lambda x: rx.timer(0.05 if x == "a" else 0.01), lambda x: rx.timer(0.01))),
        values={"x": ("a", 1), "y": ("a", 2)}),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
