"""The docstring marble diagrams of the aggregates and reducers (operators/_aggregating.py), each played by its runner
(the package docstring says how)."""

from __future__ import annotations

from typing import Callable

import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.testing import Marbles, run_virtual

from .helpers import FOUND, Block, diagram_id, kit, two_sources


def to_future(block: Block) -> None:
    async def main() -> None:  # the future's outcome as a stream, drawn on the same clock
        m = Marbles()
        source = m.cold(block["source"])
        outcome = rx.defer(lambda: rx.from_future(source.pipe(ops.to_future())))
        (await m.run(outcome, demand=block["demand"])).expect(block["output"])
    run_virtual(main())


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.last", 0): kit(lambda: ops.last(prefetch=4)),
    ("ops.reduce", 0): kit(lambda: ops.reduce(lambda acc, x: acc + x)),
    ("ops.count", 0): kit(lambda: ops.count(prefetch=4)),
    ("ops.to_list", 0): kit(lambda: ops.to_list(prefetch=4), values={"x": ["a", "b", "c"]}),
    ("ops.all", 0): kit(lambda: ops.all(lambda x: x % 2 == 0), values={"F": False}),
    ("ops.some", 0): kit(lambda: ops.some(lambda x: x % 2 == 0), values={"T": True}),
    ("ops.contains", 0): kit(lambda: ops.contains("b"), values={"T": True}),
    ("ops.is_empty", 0): kit(lambda: ops.is_empty(), values={"F": False}),
    ("ops.sequence_equal", 0): two_sources(lambda source, other: source.pipe(ops.sequence_equal(other)),
                                           other_cancelled_at=3, values={"F": False}),
    ("ops.sum", 0): kit(lambda: ops.sum(prefetch=4)),
    ("ops.average", 0): kit(lambda: ops.average(), values={"3": 3.0}),
    ("ops.max", 0): kit(lambda: ops.max()),
    ("ops.min", 0): kit(lambda: ops.min()),
    ("ops.max_by", 0): kit(lambda: ops.max_by(len), values={"a": "a", "b": "bb", "c": "c", "d": "dd",
                                                             "x": ["bb", "dd"]}),
    ("ops.min_by", 0): kit(lambda: ops.min_by(len), values={"a": "aa", "b": "b", "c": "cc", "d": "d",
                                                             "x": ["b", "d"]}),
    ("ops.to_dict", 0): kit(lambda: ops.to_dict(lambda s: s[0]), values={"a": "a1", "b": "b1", "c": "a2",
                                                                         "x": {"a": "a2", "b": "b1"}}),
    ("ops.to_set", 0): kit(lambda: ops.to_set(), values={"x": {"a", "b"}}),
    ("ops.to_future", 0): to_future,
    ("ops.single", 0): kit(lambda: ops.single(), expected_error=rx.SequenceContainsMoreThanOneElementError),
    ("ops.single_or_default", 0): kit(lambda: ops.single_or_default(None, "z")),
    ("ops.find", 0): kit(lambda: ops.find(lambda x, i, src: x == "b")),
    ("ops.find_index", 0): kit(lambda: ops.find_index(lambda x, i, src: x == "b")),
    ("ops.take_last", 0): kit(lambda: ops.take_last(2)),
    ("ops.take_last_buffer", 0): kit(lambda: ops.take_last_buffer(2), values={"x": ["c", "d"]}),
    ("ops.last_or_default", 0): kit(lambda: ops.last_or_default("z")),
    ("ops.ignore_elements", 0): kit(lambda: ops.ignore_elements(prefetch=4)),
    ("ops.fork_join", 0): two_sources(lambda source, other: source.pipe(ops.fork_join(other)),
                                      values={"z": (2, "y")}),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
