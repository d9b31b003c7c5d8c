"""An operator between a hand-driven upstream and a test subscriber, for the exact demand tests."""

from __future__ import annotations

from typing import Any

from rxpipe.testing import TestPublisher, TestSubscriber

__all__ = ["subscribe"]


def subscribe(op: Any, initial: int = 0) -> tuple[TestPublisher[Any], TestSubscriber[Any]]:
    """``TestPublisher -> op -> TestSubscriber`` subscribed, the subscriber having requested ``initial``."""
    pub, ts = TestPublisher[Any](), TestSubscriber[Any](initial_request=initial)
    pub.pipe(op).subscribe(ts)
    return pub, ts
