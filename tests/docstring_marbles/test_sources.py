"""The docstring marble diagrams of the sources of ``rxpipe`` (``rx.*``): timer, never, from_future, from_observable,
the static forms, each played by its runner (the package docstring says how)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest
from reactivex.subject import Subject

import rxpipe as rx
from rxpipe import BufferOverflowError
from rxpipe.testing import Marbles, TestSubscriber, run_virtual

from .helpers import FOUND, Block, diagram_id, requests_of, streams, tokens_of, two_sources


def from_observable(block: Block) -> None:
    pushed = tokens_of(block["observable"])[0].strip("()")
    for overflow in ("drop_incoming", "drop_oldest", "error"):
        subject: Subject[str] = Subject()
        ts = TestSubscriber[str]()
        rx.from_observable(subject, 2, overflow).subscribe(ts)
        for item in pushed:
            if item == "|":
                subject.on_completed()
            else:
                subject.on_next(item)
        assert ts.values == []
        ts.request(requests_of(block["demand"])[0][1])
        end = "|" if ts.completed else "#" if isinstance(ts.error, BufferOverflowError) else "?"
        assert "-(" + "".join(ts.values) + end + ")" == block[overflow]


def source_runner(make: Callable[[], Any]) -> Callable[[Block], None]:
    """Play a source's diagram: its ``source:`` line is what the subscriber gets under ``demand:``."""
    def run(block: Block) -> None:
        async def main() -> None:
            (await Marbles().run(make(), demand=block["demand"])).expect(block["source"])
        run_virtual(main())
    return run


def from_future(block: Block) -> None:
    (frame, value), = [(i, c) for i, c in enumerate(block["future"]) if c != "-"]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        loop.call_at(loop.time() + frame * 0.01, future.set_result, value)
        (await Marbles().run(rx.from_future(future), demand=block["demand"])).expect(block["source"])
        assert future.done()
    run_virtual(main())


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("rx.from_observable", 0): from_observable,
    ("rx.zip", 0): streams(lambda s, fn, other: rx.zip(s, other), values={"x": ("a", 1), "y": ("b", 2)}),
    ("rx.merge", 0): streams(lambda s, fn, other: rx.merge(s, other)),
    ("rx.concat", 0): streams(lambda s, fn, other: rx.concat(s, other), subscribed_later=True),
    ("rx.combine_latest", 0): streams(lambda s, fn, other: rx.combine_latest(s, other),
                                      values={"w": ("a", 1), "x": ("b", 1), "y": ("b", 2)}),
    ("rx.timer", 0): source_runner(lambda: rx.timer(0.03)),
    ("rx.timer", 1): source_runner(lambda: rx.timer(0.03, 0.02)),
    ("rx.never", 0): source_runner(rx.never),
    ("rx.from_future", 0): from_future,
    ("rx.catch", 0): streams(lambda s, fn, other: rx.catch(s, other), other_requests="    ^1", subscribed_later=True),
    ("rx.catch_with_iterable", 0): streams(lambda s, fn, other: rx.catch_with_iterable([s, other]),
                                           other_requests="  ^1    ^9", subscribed_later=True),
    ("rx.concat_with_iterable", 0): streams(lambda s, fn, other: rx.concat_with_iterable(iter([s, other])),
                                            other_requests="    ^1", subscribed_later=True),
    ("rx.with_latest_from", 0): streams(lambda s, fn, other: rx.with_latest_from(s, other), other_requests="^*",
                                        values={"x": ("b", 1), "y": ("c", 2)}),
    ("rx.zip_latest", 0): two_sources(lambda source, other: rx.zip_latest(source, other),
                                      values={"x": ("a", 1), "y": ("c", 2)}),
    ("rx.generate_with_relative_time", 0): source_runner(
        lambda: rx.generate_with_relative_time(0, lambda x: x < 4, lambda x: x + 1, lambda x: 0.02)),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
