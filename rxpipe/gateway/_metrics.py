"""Edge metrics (DESIGN §7): requests by route and code, rejections by reason, how admitted
requests ended, latency, TTFT.

Label values come from fixed sets (routes of the app, status codes, reason and outcome labels);
children are resolved once and cached, so answering a request costs no labelled lookup, and the
families are :mod:`rxpipe._loop_metrics`'s lock-free ones (updated from the loop's thread). The
series of the known label sets (every refusal reason, every outcome, 200/429/503 on the
completion routes) exist at 0 from import on, so a dashboard never shows "no data" for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._loop_metrics import CounterChild, LoopCounter, LoopHistogram
from ..errors import DroppedError

if TYPE_CHECKING:
    from ..engines import CompletionRequest

__all__ = ["HTTP_REQUESTS", "REJECTIONS", "REQUESTS_FINISHED", "REQUEST_DURATION", "TIME_TO_FIRST_TOKEN",
           "LATENCY_BUCKETS_S", "REFUSAL_REASONS", "OUTCOMES", "COMPLETION_ROUTES", "count_request",
           "count_rejection", "count_finished", "outcome_of"]

#: 5 ms – 60 s, as DESIGN §7 asks.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: the ``reason`` label values of refusals (DESIGN §5 table)
REFUSAL_REASONS = ("queue_full", "rate_limited", "deadline", "unavailable", "draining")
#: the ``outcome`` label values of ``rxpipe_requests_finished_total``
OUTCOMES = ("ok", "error", "stalled", "cancelled")
COMPLETION_ROUTES = ("/v1/completions", "/v1/chat/completions")

HTTP_REQUESTS = LoopCounter("rxpipe_http_requests", "HTTP requests answered, by route and status code.",
                        ["route", "code"])
REJECTIONS = LoopCounter("rxpipe_rejections", "Requests refused at the edge, by reason.", ["reason"])
REQUESTS_FINISHED = LoopCounter("rxpipe_requests_finished", "Admitted requests that ended, by outcome.", ["outcome"])
REQUEST_DURATION = LoopHistogram("rxpipe_request_duration_seconds",
                             "Time from request arrival to the end of its answer (seconds).",
                             buckets=LATENCY_BUCKETS_S)
TIME_TO_FIRST_TOKEN = LoopHistogram("rxpipe_time_to_first_token_seconds",
                                "Time from request arrival to its first generated token (seconds).",
                                buckets=LATENCY_BUCKETS_S)

_request_children: dict[tuple[str, int], CounterChild] = {}
_rejection_children: dict[str, CounterChild] = {reason: REJECTIONS.labels(reason=reason) for reason in REFUSAL_REASONS}
_finished_children: dict[str, CounterChild] = {outcome: REQUESTS_FINISHED.labels(outcome=outcome)
                                               for outcome in OUTCOMES}
for _route in COMPLETION_ROUTES:
    for _code in (200, 429, 503):
        _request_children[(_route, _code)] = HTTP_REQUESTS.labels(route=_route, code=str(_code))


def count_request(route: str, code: int) -> None:
    """Count one answer on ``route`` (a route of the app or ``"other"``) with status ``code``."""
    child = _request_children.get((route, code))
    if child is None:
        child = _request_children[(route, code)] = HTTP_REQUESTS.labels(route=route, code=str(code))
    child.inc()


def count_rejection(reason: str) -> None:
    """Count one refusal for ``reason`` (one of :data:`REFUSAL_REASONS`)."""
    child = _rejection_children.get(reason)
    if child is None:
        child = _rejection_children[reason] = REJECTIONS.labels(reason=reason)
    child.inc()


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

