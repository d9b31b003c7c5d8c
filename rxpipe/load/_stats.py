"""Figures of a ``rxpipe load`` run: vLLM's summary keys, refusals, and the per-second series.

Mean and standard deviation (population, as numpy's default) are exact; medians and other
percentiles come from an HdrHistogram of microseconds with 3 significant digits (so within
0.1 % of the exact order statistic). Latencies are reported in milliseconds.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from hdrh.histogram import HdrHistogram

from ._client import OUTCOMES, RequestRecord

__all__ = ["LatencySummary", "summarize_latencies", "summarize", "per_second", "DEFINITIONS", "Goodput"]

_HIGHEST_US = 3600 * 1_000_000  # one hour

#: goodput service-level objectives: metric name -> milliseconds
Goodput = dict[str, float]

DEFINITIONS: dict[str, str] = {
    "duration": "seconds from the first request sent to the last answer received",
    "sent": "requests scheduled by the open-loop arrival process and sent (retries not counted)",
    "completed": "requests whose final attempt answered 2xx with at least one token (vLLM: successful requests)",
    "failed": "sent - completed",
    "outcomes": "final outcome of each request: 2xx, 429, 503, other (other status, network or protocol "
                "error, a stream ending in an error event) or timeout (no complete answer within --timeout); "
                "they add up to sent",
    "attempts": "HTTP attempts made, retries included",
    "refusals": "every 429/503 answer received (retried or not), by status code and the error code of its "
                "body (e.g. queue_full, rate_limited, deadline, unavailable, draining; unknown if absent)",
    "shed_fraction": "share of the sent requests whose final answer was a refusal (429 or 503)",
    "rejection_latency_ms": "time from sending an attempt to receiving its 429/503 answer, milliseconds",
    "retry_after_s": "the delay refusals asked for (retry-after-ms, else Retry-After), seconds; p50/p99 are "
                     "nearest-rank percentiles; by_second counts them by whole seconds, rounded up",
    "input_lens, output_lens, ttfts, itls, latencies, start_times, errors": "vLLM's per-request arrays, one "
        "entry per request sent in order (seconds; 0 or empty where a request has no such value; start_times "
        "on the run's clock, of the final attempt)",
    "total_input_tokens": "sum of usage.prompt_tokens over completed requests",
    "total_output_tokens": "sum of output tokens over completed requests (usage.completion_tokens, else "
                           "the number of token chunks)",
    "request_throughput": "completed / duration (requests/s)",
    "request_goodput": "completed requests meeting every --goodput objective / duration (requests/s); null "
                       "without --goodput",
    "output_throughput": "total_output_tokens / duration (tokens/s)",
    "total_token_throughput": "(total_input_tokens + total_output_tokens) / duration (tokens/s)",
    "ttft": "time to first token: from sending the successful attempt to the first SSE event carrying "
            "choices, ms (--stream only; vLLM's definition)",
    "tpot": "time per output token excluding the first: (e2el - ttft) / (output tokens - 1) over requests "
            "with at least 2 output tokens, ms (--stream only; vLLM's definition)",
    "itl": "inter-token latency: every gap between consecutive token chunks of completed streams, ms "
           "(--stream only; vLLM's definition)",
    "e2el": "end-to-end latency of the successful attempt: from sending it to its last token chunk "
            "(--stream) or its complete body, ms (vLLM's definition)",
    "client_e2el": "from the scheduled arrival to the final answer, retries and their waits included, ms",
    "mean_/median_/std_/p99_": "mean and population standard deviation are exact; median and p99 come from "
                               "an HdrHistogram (3 significant digits)",
    "series": "one point per second t of the sending window, by the second an attempt was sent: offered "
              "(new requests), admitted (attempts answered 2xx), r429, r503, other, timeout, latency p50/p99 "
              "(e2el of those 2xx attempts, ms), and the server's queue (requests admitted and not running: "
              "rxpipe_stage_buffered_items + rxpipe_engine_waiting_seqs, or vLLM's num_requests_waiting) "
              "and running (rxpipe_engine_running_seqs or vLLM's num_requests_running) scraped from "
              "/metrics at t + 0.5 s; null when unavailable",
}


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Mean, median, std and p99 of a set of latencies, milliseconds (None when empty)."""

    count: int
    mean_ms: float | None
    median_ms: float | None
    std_ms: float | None
    p99_ms: float | None


def _histogram(values_s: Iterable[float]) -> HdrHistogram:
    histogram = HdrHistogram(1, _HIGHEST_US, 3)
    for value in values_s:
        histogram.record_value(min(_HIGHEST_US, max(1, round(value * 1e6))))
    return histogram


def percentile_ms(values_s: Sequence[float], percentile: float) -> float | None:
    """The ``percentile`` (0-100) of ``values_s`` (seconds) in ms, from an HdrHistogram; None if empty."""
    if not values_s:
        return None
    return float(_histogram(values_s).get_value_at_percentile(percentile)) / 1000.0


def summarize_latencies(values_s: Sequence[float]) -> LatencySummary:
    """Summarize latencies given in seconds (see the module docstring for the methods)."""
    if not values_s:
        return LatencySummary(0, None, None, None, None)
    histogram = _histogram(values_s)
    return LatencySummary(len(values_s), statistics.fmean(values_s) * 1000.0, histogram.get_value_at_percentile(50)
                          / 1000.0, statistics.pstdev(values_s) * 1000.0,
                          histogram.get_value_at_percentile(99) / 1000.0)


def _nearest_rank(ordered: Sequence[float], percentile: float) -> float | None:
    """The nearest-rank percentile of sorted values (exact: Retry-After values are few and discrete)."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(percentile / 100 * len(ordered)) - 1)]


def _error_text(record: RequestRecord) -> str:
    if not record.attempts or record.outcome == "2xx":
        return ""
    last = record.attempts[-1]
    if last.kind in ("429", "503"):
        return f"HTTP {last.kind} {last.reason or ''}".rstrip()
    return last.error or last.kind


def _by_second(asked: Sequence[float]) -> dict[str, int]:
    """How many refusals asked for each whole number of seconds (rounded up, as ``Retry-After``)."""
    counts = Counter(str(max(0, math.ceil(value))) for value in asked)
    return {key: counts[key] for key in sorted(counts, key=int)}


def _good(record: RequestRecord, goodput: Goodput) -> bool:
    measured = {"ttft": record.ttft_s, "e2el": record.e2el_s, "tpot": record.tpot_s or 0.0}
    for name, limit_ms in goodput.items():
        value = measured[name]
        if value is None or value * 1000.0 > limit_ms:
            return False
    return True


def summarize(records: Sequence[RequestRecord], duration_s: float, goodput: Goodput | None = None) -> dict[str, Any]:
    """The run's figures as a JSON-ready dict (keys and meanings in :data:`DEFINITIONS`)."""
    ok = [r for r in records if r.outcome == "2xx"]
    outcomes = Counter(r.outcome for r in records)
    attempts = [a for r in records for a in r.attempts]
    refusals: dict[str, dict[str, int]] = {"429": {}, "503": {}}
    for a in attempts:
        if a.kind in refusals:
            reason = a.reason or "unknown"
            refusals[a.kind][reason] = refusals[a.kind].get(reason, 0) + 1
    refused_latencies = [a.latency_s for a in attempts if a.kind in ("429", "503")]
    asked = sorted(a.retry_after_s for a in attempts if a.retry_after_s is not None)
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    duration = duration_s if duration_s > 0 else math.nan
    result: dict[str, Any] = {
        "duration": duration_s,
        "sent": len(records),
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "outcomes": {name: outcomes.get(name, 0) for name in OUTCOMES},
        "attempts": len(attempts),
        "refusals": refusals,
        "shed_fraction": (outcomes.get("429", 0) + outcomes.get("503", 0)) / len(records) if records else 0.0,
        "rejection_latency_ms": {"p50": percentile_ms(refused_latencies, 50),
                                 "p99": percentile_ms(refused_latencies, 99)},
        "retry_after_s": {"count": len(asked), "min": asked[0] if asked else None,
                          "p50": _nearest_rank(asked, 50), "p99": _nearest_rank(asked, 99),
                          "max": asked[-1] if asked else None,
                          "by_second": _by_second(asked)},
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration,
        "request_goodput": (sum(1 for r in ok if _good(r, goodput)) / duration) if goodput else None,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
    }
    # vLLM's per-request arrays (one entry per request sent, in order; 0 / "" where it has none)
    result["input_lens"] = [r.prompt_tokens for r in records]
    result["output_lens"] = [r.output_tokens if r.outcome == "2xx" else 0 for r in records]
    result["ttfts"] = [r.ttft_s or 0.0 for r in records]
    result["itls"] = [list(r.itl_s) for r in records]
    result["latencies"] = [r.e2el_s or 0.0 for r in records]
    result["start_times"] = [r.attempts[-1].sent_s if r.attempts else r.arrival_s for r in records]
    result["errors"] = [_error_text(r) for r in records]
    streamed = any(r.ttft_s is not None for r in ok)
    series = {
        "ttft": [r.ttft_s for r in ok if r.ttft_s is not None],
        "tpot": [t for r in ok if (t := r.tpot_s) is not None],
        "itl": [gap for r in ok for gap in r.itl_s],
        "e2el": [r.e2el_s for r in ok if r.e2el_s is not None],
        "client_e2el": [r.done_s - r.arrival_s for r in ok if r.done_s is not None],
    }
    for name, values in series.items():
        summary = summarize_latencies(values)  # type: ignore[arg-type]
        measured = streamed or name not in ("ttft", "tpot", "itl")
        for stat in ("mean", "median", "std", "p99"):
            value = getattr(summary, f"{stat}_ms")
            result[f"{stat}_{name}_ms"] = (value if value is not None else 0.0) if measured else None
    return result


def per_second(records: Sequence[RequestRecord], seconds: int,
               scrapes: Sequence[tuple[float | None, float | None]] | None = None) -> list[dict[str, Any]]:
    """One point per second ``t`` in ``range(seconds)`` (see ``DEFINITIONS["series"]``);
    ``scrapes[t]`` is the server's (queue, running) at ``t + 0.5`` s, or None values."""
    points: list[dict[str, Any]] = [
        {"t": t, "offered": 0, "admitted": 0, "r429": 0, "r503": 0, "other": 0, "timeout": 0,
         "latency_p50_ms": None, "latency_p99_ms": None, "queue": None, "running": None}
        for t in range(seconds)]
    latencies: list[list[float]] = [[] for _ in range(seconds)]
    field = {"2xx": "admitted", "429": "r429", "503": "r503", "other": "other", "timeout": "timeout"}
    for record in records:
        t = int(record.arrival_s)
        if 0 <= t < seconds:
            points[t]["offered"] += 1
        for attempt in record.attempts:
            t = int(attempt.sent_s)
            if 0 <= t < seconds:
                points[t][field[attempt.kind]] += 1
                if attempt.kind == "2xx":
                    latencies[t].append(record.e2el_s if record.e2el_s is not None else attempt.latency_s)
    for t, point in enumerate(points):
        point["latency_p50_ms"] = percentile_ms(latencies[t], 50)
        point["latency_p99_ms"] = percentile_ms(latencies[t], 99)
        if scrapes is not None and t < len(scrapes):
            point["queue"], point["running"] = scrapes[t]
    return points
