"""The docstring marble diagrams of catch, retry and on_error_resume_next (operators/_error_handling.py), each played
by its runner (the package docstring says how)."""

from __future__ import annotations

from typing import Callable

import pytest

from rxpipe import operators as ops
from rxpipe.testing import Marbles, run_virtual

from .helpers import FOUND, Block, diagram_id, kit, two_sources


def catch(block: Block) -> None:
    async def main() -> None:
        m = Marbles()
        source, handler = m.cold(block["source"]), m.cold(block["handler"])
        result = await m.run(source.pipe(ops.catch(handler)), demand=block["demand"])
        result.expect(block["output"])
        (failed_at, owed), = handler.request_log  # asked once, when the source failed
        assert failed_at == len(block["source"]) - 1 and owed == 2
    run_virtual(main())


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.catch", 0): catch,
    ("ops.retry", 0): kit(lambda: ops.retry(3), expected_error=Exception),
    ("ops.on_error_resume_next", 0): two_sources(lambda source, other: source.pipe(ops.on_error_resume_next(other)),
                                                 subscribed_later=True),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
