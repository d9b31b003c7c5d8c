"""A queue whose one subscriber comes later: the groups of ``group_by``, the substreams of
``split_when`` (emitted as Flowables, subscribed by whoever receives them)."""

from __future__ import annotations

from typing import Any

from rxpipe._protocol import Subscriber
from rxpipe.errors import ProtocolViolationError
from rxpipe.stage import EMPTY_SUBSCRIPTION, QueueDrainSubscription

__all__ = ["LateSubscription"]


class LateSubscription(QueueDrainSubscription):
    """Items queue (``push``) before and after the subscriber comes (``attach``); the terminal
    signal (``terminate``) follows them. Unicast: a second subscriber gets
    ``ProtocolViolationError`` naming :meth:`unicast_name`."""

    __slots__ = ("subscribed",)

    def __init__(self) -> None:
        super().__init__(None)  # type: ignore[arg-type]  # the subscriber comes with attach()
        self.subscribed = False

    def unicast_name(self) -> str:
        """What the error names: e.g. ``group 'a' of stage 'group_by_1'``."""
        raise NotImplementedError

    def attach(self, subscriber: Subscriber[Any]) -> None:
        if self.subscribed:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_error(ProtocolViolationError(f"{self.unicast_name()} already has a subscriber (it is "
                                                       f"unicast)"))
            return
        self.subscribed = True
        self.downstream = subscriber
        subscriber.on_subscribe(self)
        self.drain()  # already terminated and empty: it completes without demand

    def push(self, item: Any) -> None:
        self.queue.append(item)
        if self.subscribed:
            self.drain()

    def terminate(self, error: BaseException | None) -> None:
        self.error = error
        self.finished = True
        if self.subscribed:
            self.drain()
