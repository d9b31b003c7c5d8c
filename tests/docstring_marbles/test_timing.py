"""The docstring marble diagrams of the time operators (operators/_timing.py), each played by its runner (the package
docstring says how)."""

from __future__ import annotations

from typing import Any, Callable

import pytest

import rxpipe as rx
from rxpipe import operators as ops

from .helpers import FOUND, Block, diagram_id, kit, two_sources


def _rounded(item: Any) -> Any:
    """A Timestamp / TimeInterval with its seconds rounded (the virtual clock's float sums)."""
    return type(item)(item[0], round(item[1], 6))


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.timeout", 0): kit(lambda: ops.timeout(5), frame_s=1.0, expected_error=TimeoutError),
    ("ops.timeout", 1): kit(lambda: ops.timeout(5), frame_s=1.0),
    ("ops.timeout", 2): kit(lambda: ops.timeout(5, mode="item"), frame_s=1.0, expected_error=TimeoutError),
    ("ops.debounce", 0): kit(lambda: ops.debounce(0.03)),
    ("ops.sample", 0): kit(lambda: ops.sample(0.04)),
    ("ops.throttle_first", 0): kit(lambda: ops.throttle_first(0.04)),
    ("ops.delay", 0): kit(lambda: ops.delay(0.03)),
    ("ops.timestamp", 0): kit(lambda: rx.pipe(ops.timestamp(), ops.map(_rounded)),
                              values={"x": ops.Timestamp("a", 0.01), "y": ops.Timestamp("b", 0.04)}),
    ("ops.time_interval", 0): kit(lambda: rx.pipe(ops.time_interval(), ops.map(_rounded)),
                                  values={"x": ops.TimeInterval("a", 0.01), "y": ops.TimeInterval("b", 0.03)}),
    ("ops.take_with_time", 0): kit(lambda: ops.take_with_time(0.05)),
    ("ops.take_until_with_time", 0): kit(lambda: ops.take_until_with_time(0.05)),
    ("ops.skip_with_time", 0): kit(lambda: ops.skip_with_time(0.06)),
    ("ops.skip_until_with_time", 0): kit(lambda: ops.skip_until_with_time(0.05)),
    ("ops.take_last_with_time", 0): kit(lambda: ops.take_last_with_time(0.05)),
    ("ops.skip_last_with_time", 0): kit(lambda: ops.skip_last_with_time(0.04)),
    ("ops.delay_subscription", 0): kit(lambda: ops.delay_subscription(0.03)),
    ("ops.delay_with_mapper", 0): kit(lambda: ops.delay_with_mapper(lambda x: rx.timer(0.04 if x == "a" else 0.01))),
    ("ops.throttle_with_timeout", 0): kit(lambda: ops.throttle_with_timeout(0.03)),
    ("ops.throttle_with_mapper", 0): kit(lambda: ops.throttle_with_mapper(lambda x: rx.timer(0.04))),
    ("ops.timeout_with_mapper", 0): two_sources(lambda source, other: source.pipe(ops.timeout_with_mapper(
        rx.timer(0.04), lambda x: rx.timer(0.04), other)), subscribed_later=True),
    ("ops.timeout", 3): two_sources(lambda source, other: source.pipe(ops.timeout(0.03, other)),
                                    subscribed_later=True),
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
