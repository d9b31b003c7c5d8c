"""rxpipe: reactive-streams pipelines for LLM serving, with backpressure from the graph itself.

    import rxpipe as rx
    from rxpipe import operators as ops

    doubled = rx.range(0, 10).pipe(ops.map(lambda x: x * 2), ops.filter(lambda x: x % 3 == 0))
    print(await doubled.to_list())          # [0, 6, 12, 18]

The protocol is Reactive Streams 1.0.4 (``request(n)`` demand; DESIGN §2). Operators live in
``rxpipe.operators``; engines in ``rxpipe.engines``; the test kit in ``rxpipe.testing``.
"""

from ._async_sources import from_async_iterable, interval
from ._loop_sources import from_future, never, timer
from ._protocol import UNBOUNDED, Processor, Publisher, Subscriber, Subscription
from ._rx_sources import (
    amb,
    case,
    create,
    fork_join,
    from_,
    from_callable,
    from_list,
    generate,
    if_then,
    of,
    on_error_resume_next,
    repeat_value,
    return_value,
    start,
    throw,
    using,
)
from .errors import (
    ArgumentOutOfRangeError,
    BufferOverflowError,
    CircuitOpenError,
    DroppedError,
    EngineError,
    EngineUnavailableError,
    MissingBackpressureError,
    ProtocolViolationError,
    RxPipeError,
    SequenceContainsMoreThanOneElementError,
    SequenceContainsNoElementsError,
    TooManyGroupsError,
)
from .flowable import DEFAULT_PREFETCH, Flowable, pipe
from .interop import from_observable
from .resilience import CircuitBreaker, Retry
from .runtime import Pipeline, RunningPipeline
from .sources import defer, empty, error, from_iterable, from_publisher, just, range

__all__ = [
    "UNBOUNDED",
    "DEFAULT_PREFETCH",
    "Publisher",
    "Subscriber",
    "Subscription",
    "Processor",
    "Flowable",
    "pipe",
    "Pipeline",
    "RunningPipeline",
    "from_iterable",
    "range",
    "just",
    "empty",
    "error",
    "defer",
    "from_async_iterable",
    "interval",
    "from_publisher",
    "from_observable",
    # reactivex's creation functions (DESIGN §3, the kit's third round)
    "of", "from_", "from_list", "return_value", "throw", "create", "generate", "repeat_value",
    "from_callable", "start", "amb", "fork_join", "case", "if_then", "using", "on_error_resume_next",
    "RxPipeError",
    "MissingBackpressureError",
    "BufferOverflowError",
    "CircuitOpenError",
    "DroppedError",
    "EngineError",
    "EngineUnavailableError",
    "ProtocolViolationError",
    "TooManyGroupsError",
    "SequenceContainsNoElementsError",
    "SequenceContainsMoreThanOneElementError",
    "ArgumentOutOfRangeError",
    "Retry",
    "CircuitBreaker",
]

# -- second round: sources (issue 22) --
__all__ += ["timer", "never", "from_future"]

__version__ = "0.1.0"

# -- second round: the static forms of the combining operators (rx.zip(a, b) == a.pipe(ops.zip(b))) --
from ._combine_sources import combine_latest, concat, merge, zip  # noqa: E402

__all__ += ["zip", "merge", "concat", "combine_latest"]

# -- the rest of reactivex's creation functions (DESIGN §3, the kit's third round) --
from ._callback_sources import from_callback, start_async, to_async  # noqa: E402
from ._combine_sources import with_latest_from, zip_latest  # noqa: E402
from ._loop_sources import generate_with_relative_time  # noqa: E402
from ._sequence_sources import catch, catch_with_iterable, concat_with_iterable, for_in  # noqa: E402

__all__ += ["catch", "catch_with_iterable", "concat_with_iterable", "for_in", "with_latest_from", "zip_latest",
            "generate_with_relative_time", "start_async", "from_callback", "to_async"]
