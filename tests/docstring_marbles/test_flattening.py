"""The docstring marble diagrams of flat_map & co (operators/_flattening.py), each played by its runner (the package
docstring says how)."""

from __future__ import annotations

from typing import Callable

import pytest

from rxpipe import operators as ops

from .helpers import FOUND, Block, diagram_id, streams

RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.flat_map", 0): streams(lambda s, fn: s.pipe(ops.flat_map(fn, max_concurrency=2))),
    ("ops.concat_map", 0): streams(lambda s, fn: s.pipe(ops.concat_map(fn))),
    ("ops.switch_map", 0): streams(lambda s, fn: s.pipe(ops.switch_map(fn))),
    ("ops.merge_all", 0): streams(lambda s, fn: s.pipe(ops.map(fn), ops.merge_all())),
    ("ops.concat_all", 0): streams(lambda s, fn: s.pipe(ops.map(fn), ops.concat_all())),
    ("ops.switch_latest", 0): streams(lambda s, fn: s.pipe(ops.map(fn), ops.switch_latest())),
    ("ops.exclusive", 0): streams(lambda s, fn: s.pipe(ops.map(fn), ops.exclusive())),
    ("ops.flat_map_indexed", 0): streams(lambda s, fn: s.pipe(ops.flat_map_indexed(lambda x, i: fn(x)))),
    ("ops.flat_map_latest", 0): streams(lambda s, fn: s.pipe(ops.flat_map_latest(fn))),
    ("ops.switch_map_indexed", 0): streams(lambda s, fn: s.pipe(ops.switch_map_indexed(lambda x, i: fn(x)))),
    ("ops.expand", 0): streams(lambda s, fn: s.pipe(ops.expand(fn))),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
