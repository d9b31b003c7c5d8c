"""The docstring marble diagrams of repeat, do_while and while_do (operators/_repeating.py), each played by its runner
(the package docstring says how)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from rxpipe import operators as ops

from .helpers import FOUND, Block, diagram_id, kit


def _true_times(k: int) -> Callable[[Any], bool]:
    calls = [0]

    def condition(source: Any) -> bool:
        calls[0] += 1
        return calls[0] <= k
    return condition


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.repeat", 0): kit(lambda: ops.repeat(3)),
    ("ops.do_while", 0): kit(lambda: ops.do_while(_true_times(1))),
    ("ops.while_do", 0): kit(lambda: ops.while_do(_true_times(2))),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
