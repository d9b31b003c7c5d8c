"""Edge metrics (DESIGN §7): requests by route and code, rejections by reason, latency, TTFT.

Label values come from fixed sets (routes of the app, status codes, reason labels); children are
resolved once and cached, so answering a request costs no labelled lookup.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

__all__ = ["HTTP_REQUESTS", "REJECTIONS", "REQUEST_DURATION", "TIME_TO_FIRST_TOKEN", "LATENCY_BUCKETS_S",
           "count_request", "count_rejection"]

#: 5 ms – 60 s, as DESIGN §7 asks.
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

HTTP_REQUESTS = Counter("rxpipe_http_requests", "HTTP requests answered, by route and status code.",
                        ["route", "code"])
REJECTIONS = Counter("rxpipe_rejections", "Requests refused at the edge, by reason.", ["reason"])
REQUEST_DURATION = Histogram("rxpipe_request_duration_seconds",
                             "Time from request arrival to the end of its answer (seconds).",
                             buckets=LATENCY_BUCKETS_S)
TIME_TO_FIRST_TOKEN = Histogram("rxpipe_time_to_first_token_seconds",
                                "Time from request arrival to its first generated token (seconds).",
                                buckets=LATENCY_BUCKETS_S)

_request_children: dict[tuple[str, int], Counter] = {}
_rejection_children: dict[str, Counter] = {}


def count_request(route: str, code: int) -> None:
    child = _request_children.get((route, code))
    if child is None:
        child = _request_children[(route, code)] = HTTP_REQUESTS.labels(route=route, code=str(code))
    child.inc()


def count_rejection(reason: str) -> None:
    child = _rejection_children.get(reason)
    if child is None:
        child = _rejection_children[reason] = REJECTIONS.labels(reason=reason)
    child.inc()
