"""The docstring marble diagrams of group_by, the buffers and the windows (operators/_windowing.py), each played by its
runner (the package docstring says how)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, TooManyGroupsError
from rxpipe import operators as ops
from rxpipe.testing import Marbles, TestPublisher, TestSubscriber, run_virtual

from .helpers import FOUND, Block, diagram_id, kit, tokens_of, two_sources


def group_by(block: Block) -> None:
    source = tokens_of(block["source"])
    closed = source[-1] == "|"
    items = source[:-1] if closed else source
    pub = TestPublisher[str]()
    main = TestSubscriber[Any](initial_request=UNBOUNDED)
    lanes: dict[str, TestSubscriber[str]] = {}

    def attach(group: Any) -> None:
        lanes[group.key.upper()] = ts = TestSubscriber[str](initial_request=UNBOUNDED)
        group.subscribe(ts)

    max_groups = 3 if closed else 2  # as the two diagrams say
    pub.pipe(ops.group_by(lambda s: s[0], max_groups=max_groups), ops.tap(attach)).subscribe(main)
    pub.emit(*items)
    if closed:
        pub.complete()
    assert "".join(lanes) == "".join(t for t in tokens_of(block["main"]) if t not in "|#")
    for key, ts in lanes.items():
        if key in block:
            assert ts.values + (["|"] if ts.completed else ["#"] if ts.error else []) == tokens_of(block[key])
    if closed:
        assert main.completed
    else:
        assert isinstance(main.error, TooManyGroupsError) and pub.cancelled


def windows(build: Callable[..., Any], *, pairs: bool = False) -> Callable[[Block], None]:
    """A block whose ``main`` row names the windows (``A``, ``B`` ...) as they come, each with its
    own row: the main row is played exactly (cold ``source`` and ``other``, virtual time); each
    window is subscribed as it comes, without bound, and its items and terminal signal are
    its row's (as ``group_by``'s lanes). ``pairs``: the stream emits ``(item, window)``."""
    def run(block: Block) -> None:
        async def main() -> None:
            m = Marbles()
            labels = iter(c for c in block["main"] if c not in "-()|# ")  # one-character marbles
            lanes: dict[str, TestSubscriber[Any]] = {}

            def attach(window: Any) -> str:
                label = next(labels)
                lanes[label] = ts = TestSubscriber[Any](initial_request=UNBOUNDED)
                (window[1] if pairs else window).subscribe(ts)
                return label

            sources = [m.cold(block["source"])] + ([m.cold(block["other"])] if "other" in block else [])
            (await m.run(build(*sources).pipe(ops.map(attach)), demand="^*")).expect(block["main"])
            for label, ts in lanes.items():
                row = [c for c in block[label] if c not in "-() "]
                assert [str(v) for v in ts.values] + (["|"] if ts.completed else []) == row, label
        run_virtual(main())
    return run


def partition(predicate: Callable[..., Any], *, indexed: bool = False) -> Callable[[Block], None]:
    """Both halves of ``partition`` played exactly on one cold source (one-character marbles):
    each half's items at their frames, and the completion of both at its frame."""
    def run(block: Block) -> None:
        async def main() -> None:
            m = Marbles(values=None if indexed else {str(i): i for i in range(10)})
            source = m.cold(block["source"])
            holds, fails = source.pipe(ops.partition_indexed(predicate) if indexed else ops.partition(predicate))
            both = rx.merge(holds.pipe(ops.map(lambda x: ("holds", x))), fails.pipe(ops.map(lambda x: ("fails", x))))
            timeline = (await m.run(both, demand="^*")).timeline
            for half in ("holds", "fails"):
                row = block[half]
                got = [(e.frame, str(e.value[1])) for e in timeline if e.kind == "next" and e.value[0] == half]
                assert got == [(i, c) for i, c in enumerate(row) if c not in "-|"], half
                assert [e.frame for e in timeline if e.kind == "complete"] == [row.index("|")]
        run_virtual(main())
    return run


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.group_by", 0): group_by,
    ("ops.group_by", 1): group_by,
    ("ops.buffer_with_count", 0): kit(lambda: ops.buffer_with_count(2), values={"x": ["a", "b"], "y": ["c", "d"]}),
    ("ops.buffer_with_time", 0): kit(lambda: ops.buffer_with_time(0.04),
                                     values={"x": ["a", "b"], "y": ["c"], "z": [], "w": []}),
    ("ops.buffer_with_time_or_count", 0): kit(lambda: ops.buffer_with_time_or_count(0.05, 3),
                                              values={"x": ["a", "b", "c"], "y": [], "z": ["d"]}),
    ("ops.buffer_when", 0): kit(lambda: ops.buffer_when(lambda: rx.timer(0.04)),
                                values={"x": ["a", "b"], "y": ["c"], "z": []}),
    ("ops.buffer_toggle", 0): two_sources(lambda source, other: source.pipe(
        ops.buffer_toggle(other, lambda o: rx.timer(0.04))), values={"x": ["b", "c"], "y": ["e"]}),
    ("ops.partition", 0): partition(lambda x: x % 2 == 0),
    ("ops.partition_indexed", 0): partition(lambda x, i: i % 2 == 0, indexed=True),
    ("ops.window", 0): windows(lambda source, other: source.pipe(ops.window(other))),
    ("ops.window_with_count", 0): windows(lambda source: source.pipe(ops.window_with_count(2))),
    ("ops.window_with_time", 0): windows(lambda source: source.pipe(ops.window_with_time(0.04))),
    ("ops.window_with_time_or_count", 0): windows(lambda source: source.pipe(ops.window_with_time_or_count(0.05, 3))),
    ("ops.window_when", 0): windows(lambda source: source.pipe(ops.window_when(lambda: rx.timer(0.04)))),
    ("ops.window_toggle", 0): windows(lambda source, other: source.pipe(
        ops.window_toggle(other, lambda o: rx.timer(0.04)))),
    ("ops.group_by_until", 0): windows(lambda source: source.pipe(
        ops.group_by_until(str.lower, None, lambda g: rx.timer(0.04)))),
    ("ops.group_join", 0): windows(lambda source, other: source.pipe(ops.group_join(
        other, lambda x: rx.timer(0.05 if x == "a" else 0.01), lambda r: rx.timer(0.01))), pairs=True),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
