"""vLLM's definitions and rxpipe's refusal figures (rxpipe.load._stats), on hand-made records."""

from __future__ import annotations

import pytest

from rxpipe.load import Attempt, RequestRecord, per_second, summarize, summarize_latencies


def ok(index: int, sent_s: float, ttft_s: float, gaps_s: list[float], tokens: int) -> RequestRecord:
    e2el = ttft_s + sum(gaps_s)
    record = RequestRecord(index, sent_s, [Attempt(sent_s, "2xx", 200, e2el)], sent_s + e2el, ttft_s, gaps_s,
                           e2el, prompt_tokens=3, output_tokens=tokens)
    return record


def refused(index: int, sent_s: float, code: str, reason: str | None, after_s: float) -> RequestRecord:
    return RequestRecord(index, sent_s, [Attempt(sent_s, code, int(code), 0.002, reason, after_s)], sent_s + 0.002)


def test_tpot_excludes_the_first_token_and_itl_keeps_every_gap() -> None:
    record = ok(0, 0.0, 0.100, [0.020, 0.030, 0.040], tokens=4)
    assert record.e2el_s == 0.19
    assert round(record.tpot_s or 0, 9) == 0.03  # (0.19 - 0.10) / (4 - 1)
    assert ok(1, 0.0, 0.1, [], tokens=1).tpot_s is None  # one token: no TPOT (vLLM skips it)
    figures = summarize([record], duration_s=2.0)
    assert figures["mean_itl_ms"] == 30.0 and figures["median_itl_ms"] == pytest.approx(30.0, rel=1e-3)
    assert round(figures["mean_tpot_ms"], 6) == 30.0 and figures["mean_ttft_ms"] == 100.0
    assert round(figures["mean_e2el_ms"], 6) == 190.0


def test_summary_keys_counts_and_refusals() -> None:
    records = [ok(0, 0.1, 0.05, [0.01] * 9, 10), ok(1, 0.5, 0.07, [0.01] * 9, 10),
               refused(2, 1.2, "429", "queue_full", 2.0), refused(3, 1.4, "429", "rate_limited", 1.0),
               refused(4, 1.6, "503", None, 1.0),
               RequestRecord(5, 1.7, [Attempt(1.7, "timeout", None, 5.0)], 6.7)]
    figures = summarize(records, duration_s=4.0, goodput={"ttft": 60.0})
    assert figures["sent"] == 6 and figures["completed"] == 2 and figures["failed"] == 4
    assert figures["outcomes"] == {"2xx": 2, "429": 2, "503": 1, "other": 0, "timeout": 1}
    assert sum(figures["outcomes"].values()) == figures["sent"]
    assert figures["refusals"] == {"429": {"queue_full": 1, "rate_limited": 1}, "503": {"unknown": 1}}
    assert figures["shed_fraction"] == 0.5
    assert figures["request_throughput"] == 0.5 and figures["request_goodput"] == 0.25  # only ttft 50 ms <= 60
    assert figures["total_output_tokens"] == 20 and figures["output_throughput"] == 5.0
    assert figures["total_input_tokens"] == 6 and figures["total_token_throughput"] == 6.5
    assert figures["retry_after_s"] == {"count": 3, "min": 1.0, "p50": 1.0, "p99": 2.0, "max": 2.0,
                                        "by_second": {"1": 2, "2": 1}}
    assert figures["output_lens"] == [10, 10, 0, 0, 0, 0] and figures["input_lens"] == [3, 3, 0, 0, 0, 0]
    assert figures["errors"] == ["", "", "HTTP 429 queue_full", "HTTP 429 rate_limited", "HTTP 503", "timeout"]
    assert len(figures["itls"]) == 6 and figures["itls"][0] == [0.01] * 9 and figures["ttfts"][2] == 0.0
    assert figures["rejection_latency_ms"] == {"p50": pytest.approx(2.0, rel=1e-3), "p99": pytest.approx(2.0, rel=1e-3)}
    for name in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p99"):
            assert f"{stat}_{name}_ms" in figures


def test_without_streaming_ttft_tpot_itl_are_null() -> None:
    record = RequestRecord(0, 0.0, [Attempt(0.0, "2xx", 200, 0.5)], 0.5, None, [], 0.5, 2, 8)
    figures = summarize([record], 1.0)
    assert figures["mean_ttft_ms"] is None and figures["p99_itl_ms"] is None and figures["mean_tpot_ms"] is None
    assert figures["mean_e2el_ms"] == 500.0 and figures["request_goodput"] is None


def test_percentiles_come_from_the_histogram_within_three_digits() -> None:
    summary = summarize_latencies([i / 1000 for i in range(1, 101)])  # 1..100 ms
    assert summary.count == 100 and round(summary.mean_ms or 0, 9) == 50.5  # exact
    # HdrHistogram at 3 significant digits: the highest value equivalent to the order statistic
    assert summary.median_ms == 50.015 and summary.p99_ms == 99.007


def test_per_second_buckets_by_the_second_an_attempt_was_sent() -> None:
    records = [ok(0, 0.1, 0.05, [0.01], 2), refused(1, 0.9, "429", "queue_full", 1.0),
               refused(2, 2.5, "503", "draining", 1.0)]
    records[1].attempts.append(Attempt(1.9, "2xx", 200, 0.3))  # its retry, a second later
    points = per_second(records, 3, [(4.0, 2.0), (None, None), (0.0, 1.0)])
    assert [p["t"] for p in points] == [0, 1, 2]
    assert [(p["offered"], p["admitted"], p["r429"], p["r503"]) for p in points] == [(2, 1, 1, 0), (0, 1, 0, 0),
                                                                                    (1, 0, 0, 1)]
    assert points[0]["latency_p50_ms"] == pytest.approx(60.0, rel=1e-3) and points[2]["latency_p50_ms"] is None
    assert (points[0]["queue"], points[0]["running"], points[1]["queue"]) == (4.0, 2.0, None)
