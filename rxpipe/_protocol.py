"""The Reactive Streams 1.0.4 interfaces in Python (DESIGN §2).

All four are abstract base classes whose methods are plain ``def`` (never ``async def``): every
signal is a synchronous call on the event loop's thread. Objects that merely have the right
methods are accepted as well (``isinstance`` checks use ``__subclasshook__``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

__all__ = ["UNBOUNDED", "Publisher", "Subscriber", "Subscription", "Processor"]

T = TypeVar("T")
R = TypeVar("R")

#: Demand meaning "no limit" (Reactive Streams §3.17, Java's ``Long.MAX_VALUE``). Demand is
#: additive and saturates at this value; Python ints never overflow, so every sum is capped.
UNBOUNDED: int = 2**63 - 1
"""``request(UNBOUNDED)`` means "no limit" (Reactive Streams §3.17: demand adds up and saturates
here, 2**63 - 1, Java's Long.MAX_VALUE; Python's ints never overflow, so the cap is explicit)."""


def _has_methods(cls: type, names: tuple[str, ...]) -> bool:
    return all(any(name in vars(base) for base in cls.__mro__) for name in names)


class Subscription(ABC):
    """The link between one Subscriber and one Publisher (Reactive Streams §3).

    ``request(n)`` adds ``n`` items of demand (§3.17: additive, saturating at ``UNBOUNDED``);
    ``n <= 0`` makes the publisher signal ``on_error(ValueError)`` (§3.9; it does not raise).
    ``cancel()`` asks the publisher to stop (§3.5–3.7: idempotent; later calls are no-ops).
    """

    __slots__ = ()

    @abstractmethod
    def request(self, n: int) -> None: ...

    @abstractmethod
    def cancel(self) -> None: ...

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        if cls is Subscription:
            return _has_methods(other, ("request", "cancel"))
        return NotImplemented


class Subscriber(ABC, Generic[T]):
    """Receives ``on_subscribe`` once, then at most as many ``on_next`` as it requested, then at
    most one terminal signal (``on_error`` or ``on_complete``). Reactive Streams §1–2."""

    __slots__ = ()

    @abstractmethod
    def on_subscribe(self, subscription: Subscription) -> None: ...

    @abstractmethod
    def on_next(self, item: T) -> None: ...

    @abstractmethod
    def on_error(self, error: BaseException) -> None: ...

    @abstractmethod
    def on_complete(self) -> None: ...

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        if cls is Subscriber:
            return _has_methods(other, ("on_subscribe", "on_next", "on_error", "on_complete"))
        return NotImplemented


class Publisher(ABC, Generic[T]):
    """A source of items that honours demand. ``subscribe`` may be called many times; each call
    starts its own subscription (cold sources are unicast, §1.11)."""

    __slots__ = ()

    @abstractmethod
    def subscribe(self, subscriber: Subscriber[T]) -> Any: ...

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        if cls is Publisher:
            return _has_methods(other, ("subscribe",))
        return NotImplemented


class Processor(Subscriber[T], Publisher[R]):
    """Both a Subscriber (of ``T``) and a Publisher (of ``R``): a stage (Reactive Streams §4)."""

    __slots__ = ()

    @classmethod
    def __subclasshook__(cls, other: type) -> bool:
        if cls is Processor:
            return _has_methods(
                other, ("subscribe", "on_subscribe", "on_next", "on_error", "on_complete")
            )
        return NotImplemented
