"""The docstring marble diagrams of the filters (operators/_filtering.py), each played by its runner (the package
docstring says how)."""

from __future__ import annotations

from typing import Callable

import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.testing import Marbles, run_virtual

from .helpers import FOUND, Block, diagram_id, kit, two_sources


def take_until(block: Block) -> None:
    async def main() -> None:
        m = Marbles()
        source, other = m.cold(block["source"]), m.cold(block["other"])
        result = await m.run(source.pipe(ops.take_until(other)), demand=block["demand"])
        result.expect(block["output"])
        assert source.cancelled_at == other.cancelled_at == len(block["output"]) - 1
        assert other.request_log == [(0, 1)]
    run_virtual(main())


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.pairwise", 0): kit(lambda: ops.pairwise(), values={"x": ("a", "b"), "y": ("b", "c"), "z": ("c", "d")}),
    ("ops.distinct", 0): kit(lambda: ops.distinct()),
    ("ops.distinct", 1): kit(lambda: ops.distinct(max_keys=2)),
    ("ops.distinct_until_changed", 0): kit(lambda: ops.distinct_until_changed()),
    ("ops.take_while", 0): kit(lambda: ops.take_while(lambda x: x < 3)),
    ("ops.skip_while", 0): kit(lambda: ops.skip_while(lambda x: x < 3)),
    ("ops.take_until", 0): take_until,
    ("ops.first", 0): kit(lambda: ops.first(lambda x: x % 2 == 0)),
    ("ops.first", 1): kit(lambda: ops.first(), expected_error=rx.SequenceContainsNoElementsError),
    ("ops.filter_indexed", 0): kit(lambda: ops.filter_indexed(lambda x, i: i % 2 == 0)),
    ("ops.take_while_indexed", 0): kit(lambda: ops.take_while_indexed(lambda x, i: i < 2)),
    ("ops.skip_while_indexed", 0): kit(lambda: ops.skip_while_indexed(lambda x, i: i < 2)),
    ("ops.skip_until", 0): two_sources(lambda source, other: source.pipe(ops.skip_until(other)),
                                       other_cancelled_at=4),
    ("ops.element_at", 0): kit(lambda: ops.element_at(2)),
    ("ops.element_at", 1): kit(lambda: ops.element_at(2), expected_error=rx.ArgumentOutOfRangeError),
    ("ops.element_at_or_default", 0): kit(lambda: ops.element_at_or_default(2, "z")),
    ("ops.first_or_default", 0): kit(lambda: ops.first_or_default(lambda x: x % 2 == 0, 0)),
    ("ops.skip_last", 0): kit(lambda: ops.skip_last(2)),
    ("ops.default_if_empty", 0): kit(lambda: ops.default_if_empty("z")),
    ("ops.slice", 0): kit(lambda: ops.slice(1, 4, 2)),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
