"""The docstring marble diagrams of the flow-control stages (operators/_flow_control.py): buffer, limit_rate, batch,
rate_limit, map_async, each played by its runner (the package docstring says how)."""

from __future__ import annotations

import asyncio
from typing import Callable

import pytest

from rxpipe import BufferOverflowError
from rxpipe import operators as ops
from rxpipe.testing import assert_marbles

from .helpers import FOUND, Block, diagram_id, kit, two_sources


def shedding(block: Block) -> None:
    for overflow in ("drop_incoming", "drop_oldest", "error"):
        assert_marbles(ops.buffer(2, overflow), source=block["source"], demand=block["demand"],
                       expected=block[overflow], expected_error=BufferOverflowError)


def map_async(block: Block) -> None:
    async def fn(x: str) -> str:
        await asyncio.sleep({"a": 4.0, "b": 1.0, "c": 1.0}[x])
        return x

    for label, ordered in (("ordered", True), ("unordered", False)):
        assert_marbles(ops.map_async(fn, concurrency=2, ordered=ordered), source=block["source"],
                       demand=block["demand"], expected=block[label], frame_s=1.0)


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.buffer", 0): kit(lambda: ops.buffer(4)),
    ("ops.buffer", 1): shedding,
    ("ops.limit_rate", 0): kit(lambda: ops.limit_rate(8, 2)),
    ("ops.batch", 0): kit(lambda: ops.batch(3, max_delay_s=0.04),
                          values={"x": ["a", "b", "c"], "y": ["d"], "z": ["e"]}),
    ("ops.batch", 1): kit(lambda: ops.batch(8, weight=len, max_weight=10),
                          values={"a": "aaaa", "b": "bbbb", "c": "cc", "d": "d" * 12, "e": "e",
                                  "x": ["aaaa", "bbbb", "cc"], "y": ["d" * 12], "z": ["e"]}),
    ("ops.rate_limit", 0): kit(lambda: ops.rate_limit(20, burst=5)),
    ("ops.map_async", 0): map_async,
    ("ops.buffer", 2): two_sources(lambda source, other: source.pipe(ops.buffer(other)),
                                   values={"p": ["a", "b"], "q": ["c"], "r": []}),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
