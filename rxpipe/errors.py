"""Exceptions of rxpipe; each names a state or a cause and subclasses :class:`RxPipeError`."""

from __future__ import annotations

__all__ = [
    "RxPipeError",
    "MissingBackpressureError",
    "BufferOverflowError",
    "CircuitOpenError",
    "ProtocolViolationError",
]


class RxPipeError(Exception):
    """Base class of every error rxpipe raises or signals."""


class MissingBackpressureError(RxPipeError):
    """An upstream emitted more items than were requested (Reactive Streams §1.1 broken).

    Signalled downstream by the stage that noticed it; that stage cancels its upstream.
    """


class BufferOverflowError(RxPipeError):
    """A bounded buffer with ``overflow="error"`` received an item while full."""


class CircuitOpenError(RxPipeError):
    """A call was refused without being attempted because its circuit breaker is open.

    Attributes:
        retry_after: seconds until the breaker lets a trial call through (half-open), or None.
    """

    def __init__(self, message: str = "circuit open", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProtocolViolationError(RxPipeError):
    """A Publisher or Subscriber broke a Reactive Streams rule other than §1.1 (e.g. §1.9)."""
