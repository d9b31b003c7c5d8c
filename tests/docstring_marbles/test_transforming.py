"""The docstring marble diagrams of the one-to-one operators (operators/_transforming.py): map, filter, scan, take,
skip, tap & co, each played by its runner (the package docstring says how)."""

from __future__ import annotations

import operator
from typing import Any, Callable

import pytest
from reactivex.notification import OnCompleted, OnError, OnNext

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.testing import assert_marbles

from .helpers import FOUND, Block, diagram_id, kit, tokens_of


class _Recorder:
    """An observer for ``do(observer)`` writing what it sees into ``calls``."""

    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def on_next(self, item: Any) -> None:
        self.calls.append(item)

    def on_completed(self) -> None:
        self.calls.append("|")


def tapped(make: Callable[[list[Any]], Any]) -> Callable[[Block], None]:
    """A tap's diagram: the items pass unchanged and the callbacks saw each signal in order."""
    def run(block: Block) -> None:
        calls: list[Any] = []
        assert_marbles(make(calls), source=block["source"], demand=block.get("demand"), expected=block["output"])
        assert calls == [t for t in tokens_of(block["source"])]
    return run


def finally_action(block: Block) -> None:
    seen: list[str] = []

    def action() -> None:
        seen.append("action")

    op = rx.pipe(ops.finally_action(action), ops.tap(on_completed=lambda: seen.append("|")))
    assert_marbles(op, source=block["source"], demand=block.get("demand"), expected=block["output"])
    assert seen == ["|", "action"]


def materialize(block: Block) -> None:
    error = RuntimeError("error")
    assert_marbles(ops.materialize(), source=block["source"], demand=block["demand"], expected=block["output"],
                   error=error, values={"x": OnNext("a"), "y": OnNext("b"), "z": OnError(error)})


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.map", 0): kit(lambda: ops.map(lambda x: x * 2)),
    ("ops.filter", 0): kit(lambda: ops.filter(lambda x: x % 2 == 0)),
    ("ops.scan", 0): kit(lambda: ops.scan(lambda acc, x: acc + x, 0)),
    ("ops.take", 0): kit(lambda: ops.take(2)),
    ("ops.skip", 0): kit(lambda: ops.skip(2)),
    ("ops.tap", 0): kit(lambda: ops.tap(lambda x: None)),
    ("ops.map_indexed", 0): kit(lambda: ops.map_indexed(lambda x, i: x * (i + 1)),
                                values={"x": "a", "y": "bb", "z": "ccc"}),
    ("ops.starmap", 0): kit(lambda: ops.starmap(operator.add), values={"x": (1, 2), "y": (3, 4)}),
    ("ops.starmap_indexed", 0): kit(lambda: ops.starmap_indexed(lambda a, b, i: a + b + i),
                                    values={"x": (1, 2, 0), "y": (3, 4, 1)}),
    ("ops.pluck", 0): kit(lambda: ops.pluck("n"), values={"x": {"n": 1}, "y": {"n": 2}}),
    ("ops.pluck_attr", 0): kit(lambda: ops.pluck_attr("real"), values={"x": 1 + 0j, "y": 2 + 0j, "1": 1.0, "2": 2.0}),
    ("ops.do_action", 0): tapped(lambda calls: ops.do_action(calls.append, on_completed=lambda: calls.append("|"))),
    ("ops.do", 0): tapped(lambda calls: ops.do(_Recorder(calls))),
    ("ops.finally_action", 0): finally_action,
    ("ops.materialize", 0): materialize,
    ("ops.dematerialize", 0): kit(lambda: ops.dematerialize(),
                                  values={"x": OnNext("a"), "y": OnNext("b"), "z": OnCompleted()}),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
