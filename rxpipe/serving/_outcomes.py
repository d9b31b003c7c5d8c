"""How admitted requests ended (DESIGN §7): ``rxpipe_requests_finished_total{outcome}``.

Counted where a request's answer ends: at the edge (the gateway's handler) and on a worker
behind a broker (``rxpipe.transport``), so both processes export the same series. The series
of every outcome exist at 0 from import on.
"""

from __future__ import annotations

from .._loop_metrics import CounterChild, LoopCounter
from ..errors import DroppedError
from .records import CompletionRequest

__all__ = ["OUTCOMES", "REQUESTS_FINISHED", "count_finished", "outcome_of"]

#: the ``outcome`` label values of ``rxpipe_requests_finished_total``
OUTCOMES = ("ok", "error", "stalled", "cancelled")

REQUESTS_FINISHED = LoopCounter("rxpipe_requests_finished", "Admitted requests that ended, by outcome.", ["outcome"])

_finished_children: dict[str, CounterChild] = {outcome: REQUESTS_FINISHED.labels(outcome=outcome)
                                               for outcome in OUTCOMES}


def count_finished(outcome: str) -> None:
    """Count one admitted request that ended with ``outcome`` (one of :data:`OUTCOMES`)."""
    _finished_children[outcome].inc()


def outcome_of(request: CompletionRequest) -> str:
    """How an admitted request ended, read from its reply and result when its answer is over.

    ``ok``: the engine finished it (``stop``/``length``) and no error ended its answer.
    ``error``: the engine failed it or was unavailable (a stream that ended in an error event
    included). ``stalled``: aborted because its reader gave no credit. ``cancelled``: it never
    finished in the engine: the client left, or the server withdrew it (drain, latency budget,
    shed by an overflow strategy).
    """
    reply = request.reply
    if reply is None or not reply.done() or reply.cancelled():
        return "cancelled"
    error = reply.exception()
    if error is not None:
        return "cancelled" if isinstance(error, DroppedError) else "error"
    result = reply.result().result
    if not result.done() or result.cancelled():
        return "cancelled"
    if result.exception() is not None:
        return "error"
    reason = result.result().finish_reason
    if reason == "stalled":
        return "stalled"
    if reason in ("cancelled", "deadline"):
        return "cancelled"
    return "ok"

