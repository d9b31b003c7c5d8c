"""Edge metrics (DESIGN §7): requests by route and code, rejections by reason, latency, TTFT (how
admitted requests ended is :mod:`rxpipe.serving._outcomes`: workers count it too).

Label values come from fixed sets (routes of the app, status codes, reason and outcome labels);
children are resolved once and cached, so answering a request costs no labelled lookup, and the
families are :mod:`rxpipe._loop_metrics`'s lock-free ones (updated from the loop's thread). The
series of the known label sets (every refusal reason, every outcome, 200/429/503 on the
completion routes) exist at 0 from import on, so a dashboard never shows "no data" for them.
"""

from __future__ import annotations

from .._loop_metrics import CounterChild, LoopCounter, LoopHistogram

__all__ = ["HTTP_REQUESTS", "REJECTIONS", "REQUEST_DURATION", "TIME_TO_FIRST_TOKEN", "LATENCY_BUCKETS_S",
           "REFUSAL_REASONS", "COMPLETION_ROUTES", "count_request", "count_rejection"]

#: 5 ms – 60 s, as DESIGN §7 asks.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: the ``reason`` label values of refusals (DESIGN §5 table)
REFUSAL_REASONS = ("queue_full", "rate_limited", "deadline", "unavailable", "draining")
COMPLETION_ROUTES = ("/v1/completions", "/v1/chat/completions")

HTTP_REQUESTS = LoopCounter("rxpipe_http_requests", "HTTP requests answered, by route and status code.",
                        ["route", "code"])
REJECTIONS = LoopCounter("rxpipe_rejections", "Requests refused at the edge, by reason.", ["reason"])
REQUEST_DURATION = LoopHistogram("rxpipe_request_duration_seconds",
                             "Time from request arrival to the end of its answer (seconds).",
                             buckets=LATENCY_BUCKETS_S)
TIME_TO_FIRST_TOKEN = LoopHistogram("rxpipe_time_to_first_token_seconds",
                                "Time from request arrival to its first generated token (seconds).",
                                buckets=LATENCY_BUCKETS_S)

_request_children: dict[tuple[str, int], CounterChild] = {}
_rejection_children: dict[str, CounterChild] = {reason: REJECTIONS.labels(reason=reason) for reason in REFUSAL_REASONS}
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
