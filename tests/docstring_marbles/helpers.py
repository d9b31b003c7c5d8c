"""The shared part of the docstring marble tests (tests/docstring_marbles/__init__.py): the blocks
found in the public docstrings (``FOUND``), the readers of a diagram's marks, and the runners more
than one operator family uses."""

from __future__ import annotations

import asyncio
import re
from typing import Any, Callable

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe import testing
from rxpipe.testing import Marbles, TestSubscriber, assert_marbles, parse_demand, run_virtual
from rxpipe.testing import _marbles as marble_module
from rxpipe.testing._marble_parse import docstring_marbles

Block = dict[str, str]
diagrams = docstring_marbles  # the blocks of a docstring: the ones the manual draws (rxpipe.testing.draw_marbles)


def _public_docs() -> dict[str, str]:
    docs: dict[str, str] = {"testing (module)": marble_module.__doc__ or ""}  # the kit's manual
    for module, prefix in ((ops, "ops."), (rx, "rx."), (testing, "testing.")):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and obj.__doc__:
                docs[prefix + name] = obj.__doc__
    return docs


#: (public name, index of the diagram in its docstring) -> the diagram's block
FOUND = {(name, k): block for name, doc in _public_docs().items() for k, block in enumerate(diagrams(doc))}


def diagram_id(key: tuple[str, int]) -> str:
    """A diagram's test id: ``ops.batch#1``."""
    return f"{key[0]}#{key[1]}"


def requests_of(diagram: str) -> list[tuple[int, int]]:
    return [(frame, n) for frame, n in parse_demand(diagram) if n is not None]


def tokens_of(diagram: str) -> list[str]:
    return [t for t in re.split(r"[-\s]+", diagram) if t]


def kit(operator: Callable[[], Any], *, frame_s: float = 0.01, values: dict[str, Any] | None = None,
        expected_error: Any = None) -> Callable[[Block], None]:
    """Run a block with the marble kit: source/demand/output, and ``upstream:`` as the exact
    requests the source sees."""
    def run(block: Block) -> None:
        upstream = block.get("upstream")
        assert_marbles(operator(), source=block["source"], demand=block.get("demand"), expected=block["output"],
                       upstream_requests=requests_of(upstream) if upstream is not None else None,
                       frame_s=frame_s, values=values, expected_error=expected_error)
    return run


def streams(build: Callable[..., Any], *, values: dict[str, Any] | None = None,
            other_requests: str | None = None, subscribed_later: bool = False) -> Callable[[Block], None]:
    """Play a block over several cold marble sources: ``source`` (the first), the other sources
    (``other``, ``third``: drawn from frame 0, or from the frame they are subscribed in with
    ``subscribed_later``, as ``concat``'s), and the inner streams of ``flat_map`` & co (the lines
    labelled by one letter: the stream ``fn`` returns for that item, drawn from the frame it is
    subscribed in). ``build(source, fn, *others)`` makes the flowable under test. ``upstream:``
    is the source's exact requests; ``other_requests`` (a demand diagram) the other's."""
    def run(block: Block) -> None:
        async def main() -> None:
            m = Marbles(values=values)
            source = m.cold(block["source"])
            others = [m.cold(block[label].strip() if subscribed_later else block[label])
                      for label in ("other", "third") if label in block]
            inner = {label: m.cold(block[label].strip()) for label in block if len(label) == 1}

            def fn(item: Any) -> Any:
                return inner[item]

            result = await m.run(build(source, fn, *others), demand=block.get("demand", "^*"))
            result.expect(block["output"], upstream_requests=requests_of(block["upstream"]) if "upstream" in block
                          else None)
            if other_requests is not None:
                assert list(others[0].request_log) == requests_of(other_requests)
        run_virtual(main())
    return run


def two_sources(build: Callable[[Any, Any], Any], *, other_cancelled_at: int | None = None,
                values: dict[str, Any] | None = None, subscribed_later: bool = False) -> Callable[[Block], None]:
    """A block with a ``source`` and an ``other`` (cold, from frame 0; or drawn from the frame it
    is subscribed in with ``subscribed_later``)."""
    def run(block: Block) -> None:
        async def main() -> None:
            m = Marbles(values=values)
            source = m.cold(block["source"])
            other = m.cold(block["other"].strip() if subscribed_later else block["other"])
            (await m.run(build(source, other), demand=block.get("demand", "^*"))).expect(block["output"])
            if other_cancelled_at is not None:
                assert other.cancelled_at == other_cancelled_at
        run_virtual(main())
    return run


class FrameTimeline(TestSubscriber[Any]):
    """A TestSubscriber recording each signal as a marble event at its frame of the loop clock."""

    __test__ = False

    def __init__(self, frame_s: float = 0.01) -> None:
        super().__init__()
        self.frame_s = frame_s
        self.events: list[tuple[int, str, Any]] = []

    def _frame(self) -> int:
        return round(asyncio.get_running_loop().time() / self.frame_s)

    def on_next(self, item: Any) -> None:
        self.events.append((self._frame(), "next", item))
        super().on_next(item)

    def on_error(self, error: BaseException) -> None:
        self.events.append((self._frame(), "error", None))
        super().on_error(error)

    def on_complete(self) -> None:
        self.events.append((self._frame(), "complete", None))
        super().on_complete()


def expect_events(timeline: FrameTimeline, diagram: str) -> None:
    assert timeline.events == [(e.frame, e.kind, e.value if e.kind == "next" else None)
                               for e in testing.parse_marbles(diagram)], diagram


def schedule_requests(loop: asyncio.AbstractEventLoop, ts: TestSubscriber[Any], diagram: str,
                      frame_s: float = 0.01) -> None:
    """Schedule ``ts``'s requests of a demand diagram on the loop clock (before a Marbles run:
    in a frame, they act before the sources' events, as the marble kit's own demand marks)."""
    for frame, n in parse_demand(diagram):
        assert n is not None
        loop.call_at(frame * frame_s, ts.request, n)


