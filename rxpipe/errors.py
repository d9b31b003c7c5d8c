"""Exceptions of rxpipe; each names a state or a cause and subclasses :class:`RxPipeError`."""

from __future__ import annotations

__all__ = [
    "RxPipeError",
    "MissingBackpressureError",
    "BufferOverflowError",
    "CircuitOpenError",
    "DroppedError",
    "ProtocolViolationError",
    "TooManyGroupsError",
    "EngineError",
    "EngineUnavailableError",
    "BackendError",
    "UnsupportedRequestError",
    "StartError",
    "SequenceContainsNoElementsError",
    "SequenceContainsMoreThanOneElementError",
    "ArgumentOutOfRangeError",
]


class RxPipeError(Exception):
    """Base class of every error rxpipe raises or signals."""


class MissingBackpressureError(RxPipeError):
    """An upstream emitted more items than were requested (Reactive Streams §1.1 broken).

    Signalled downstream by the stage that noticed it; that stage cancels its upstream.
    """


class BufferOverflowError(RxPipeError):
    """A bounded buffer with ``overflow="error"`` received an item while full, or a Stage held more
    items than its ``max_held`` (the message names the stage and the cap)."""


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


class TooManyGroupsError(RxPipeError):
    """``group_by`` met a new key while ``max_groups`` groups were already open.

    Akka's ``TooManySubstreamsOpenException``: the stage cancels its upstream and signals this
    error on the main stream and on every open group (after the items they already hold).

    Attributes:
        key: the key that would have opened one group too many. max_groups: the bound (groups).
    """

    def __init__(self, message: str, key: object = None, max_groups: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.max_groups = max_groups


class EngineError(RxPipeError):
    """An inference engine failed a request (``await completion.result`` raises it; the token
    stream signals it with ``on_error``)."""


class EngineUnavailableError(EngineError):
    """The engine cannot take work now: it is down, closed or its circuit is open.

    ``Engine.submit`` raises it; the gateway answers 503 (DESIGN §5).
    """


class BackendError(EngineError):
    """A backend answered a request with an error the gateway passes on (DESIGN §4): its client
    gets ``status`` and OpenAI's error body ``{"error": {"message": client_message, "type",
    "code", "param"}}``. ``str()`` is the whole story for the log (the backend's URL, status and
    message); ``client_message`` has no address or other internal detail.

    Attributes: status (what the client gets: the backend's 4xx, or 502), backend_status (what
    the backend answered), client_message, type, code, param (OpenAI's error fields).
    ``client_fault``: True for a 4xx passed on — the same request fails on every replica, so it
    is not retried on another.
    """

    def __init__(self, message: str, *, status: int, backend_status: int, client_message: str,
                 type: str, code: str | None = None, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.backend_status = backend_status
        self.client_message = client_message
        self.type = type
        self.code = code
        self.param = param

    @property
    def client_fault(self) -> bool:
        return 400 <= self.status < 500


class UnsupportedRequestError(EngineError, ValueError):
    """An engine cannot serve a request of this shape: chat messages sent to an engine that
    serves only ``/v1/completions``, neither prompt nor messages, or a feature the engine does
    not declare (``tools`` to a SimulatedEngine, say: ``param`` names the field). ``Engine.submit`` raises it
    (from ``prepare``) before anything is queued or sent; the gateway answers 400
    ``invalid_request_error`` with ``code`` ``"unsupported_request"`` and ``client_message``
    (DESIGN §4: bad input gets a 4xx). ``str()`` names the engine and its backend, for the log;
    ``client_message`` has no address. A ValueError too, as ``prepare`` documents.
    """

    def __init__(self, message: str, *, client_message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.client_message = client_message
        #: the request field the engine cannot serve (OpenAI's error ``param``), if one is to blame
        self.param = param


class DroppedError(RxPipeError):
    """A stage dropped an accepted item: shed by an overflow strategy (``reason`` is the strategy,
    e.g. ``"drop_oldest"``) or left behind when the stage failed (``"error"``).

    Items learn of it through their ``on_discard(reason)`` method (:func:`rxpipe._demand.discard`);
    a :class:`~rxpipe.engines.CompletionRequest` fails its reply with this error, so the edge can
    answer its client instead of leaving it waiting.
    """

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


class StartError(RxPipeError):
    """A service of a pipeline could not start (its port is in use, say); the message says which
    and what to do, in one line (``rxpipe run`` prints it as is)."""


class SequenceContainsNoElementsError(RxPipeError):
    """``first``, ``last`` or ``reduce`` without a seed met a stream that completed without an
    item (with a predicate: without an item that satisfied it).

    The name and the message ("Sequence contains no elements") are reactivex's, so code and
    logs read the same; it subclasses :class:`RxPipeError` (reactivex's is a plain Exception).
    """

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or "Sequence contains no elements")


class SequenceContainsMoreThanOneElementError(RxPipeError):
    """``single`` (or ``single_or_default``) met a second item (with a predicate: a second item
    that satisfied it); upstream is cancelled. The message is reactivex's ("Sequence contains more
    than one element"; reactivex signals a plain Exception)."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or "Sequence contains more than one element")


class ArgumentOutOfRangeError(RxPipeError, ValueError):
    """``element_at(index)`` met a stream of ``index`` items or fewer. The name and message
    ("Argument out of range") are reactivex's ``ArgumentOutOfRangeException``'s, a ValueError
    there too."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or "Argument out of range")
