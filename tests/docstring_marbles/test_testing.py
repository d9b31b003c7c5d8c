"""The docstring marble diagrams of the marble kit's own manual and functions (``rxpipe.testing``), each played by its
runner (the package docstring says how)."""

from __future__ import annotations

from typing import Callable

import pytest

from rxpipe import operators as ops

from .helpers import FOUND, Block, diagram_id, kit

RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("testing.assert_marbles", 0): kit(lambda: ops.map(lambda x: x * 2)),
    ("testing.draw_marbles", 0): kit(lambda: ops.map(lambda x: x * 2)),
    ("testing (module)", 0): kit(lambda: ops.filter(lambda x: x % 2 == 0)),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
