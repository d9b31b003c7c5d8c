"""Retry-After from the measured drain rate, and per-key buckets."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from rxpipe.gateway._policy import DrainMeter, KeyBuckets, clamp_retry_after

if TYPE_CHECKING:
    from rxpipe.gateway import Gateway


def test_drain_meter_rate_backlog_and_wait() -> None:
    meter = DrainMeter(horizon_s=10.0)
    assert meter.rate(0.0) is None and meter.estimated_wait(0.0) == 0.0
    for _ in range(5):
        meter.record_admit()
    assert meter.backlog == 5 and meter.estimated_wait(0.0) is None  # no rate measured yet
    meter.record_start(1.0)
    assert meter.rate(1.5) is None  # one start is no rate
    for t in (1.5, 2.0, 2.5):
        meter.record_start(t)
    assert meter.backlog == 1
    assert meter.rate(3.0) == pytest.approx(4 / 2.0)
    assert meter.estimated_wait(3.0) == pytest.approx(1 / 2.0)
    meter.record_abandon()
    assert meter.backlog == 0
    meter.record_abandon()  # never negative
    assert meter.backlog == 0
    assert meter.rate(20.0) is None  # starts older than the horizon are forgotten


def test_retry_after_clamp() -> None:
    assert clamp_retry_after(None, 1, 60) == 1
    assert clamp_retry_after(0.2, 1, 60) == 1
    assert clamp_retry_after(7.5, 1, 60) == 7.5
    assert clamp_retry_after(600, 1, 60) == 60
    assert clamp_retry_after(float("nan"), 1, 60) == 1


def test_key_buckets_are_separate_and_bounded() -> None:
    buckets = KeyBuckets(rate=1.0, burst=2, max_keys=2)
    assert buckets.check("a", 0.0)[0] and buckets.check("a", 0.0)[0]
    allowed, headers, wait = buckets.check("a", 0.0)
    assert not allowed and wait == pytest.approx(1.0)
    assert headers == {"x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "0",
                       "x-ratelimit-reset-requests": "2.00s"}
    assert buckets.check("b", 0.0)[0]
    buckets.check("c", 0.0)  # evicts the least recently used ("a")
    assert set(buckets.buckets) == {"b", "c"}
    assert buckets.check("a", 0.0)[0]  # a fresh, full bucket


def measured(gateway: Gateway, backlog: int, starts: list[float]) -> None:
    for t in starts:
        gateway.meter.record_admit()
        gateway.meter.record_start(t)
    for _ in range(backlog):
        gateway.meter.record_admit()


def test_deadline_refusal_from_estimated_wait() -> None:
    from rxpipe.gateway import Gateway

    gateway = Gateway(latency_budget_s=0.5)
    measured(gateway, backlog=8, starts=[0.1 * i for i in range(10)])  # 10 starts in 1 s
    refusal = gateway.policy_refusal("anonymous", 1.0)
    assert refusal is not None
    assert (refusal.status, refusal.reason, refusal.retry_after_s) == (429, "deadline", 1.0)
    assert "estimated time to answer 0.88 s exceeds the latency budget 0.5 s" == refusal.message  # 0.8 × 1.1
    for _ in range(5):
        gateway.meter.record_abandon()
    assert gateway.policy_refusal("anonymous", 1.0) is None  # 3 / 10 per s × 1.1 = 0.33 s: within budget
    for service in [0.1] * 9 + [0.3]:
        gateway.meter.record_service(service)
    assert gateway.meter.service_time() == 0.3  # p90 of ten samples
    refusal = gateway.policy_refusal("anonymous", 1.0)  # 0.33 + 0.3 = 0.63 s > 0.5 s
    assert refusal is not None and refusal.message.startswith("estimated time to answer 0.63 s")


def test_queue_full_retry_after_is_backlog_over_drain_rate() -> None:
    from rxpipe.gateway import Gateway

    gateway = Gateway()
    measured(gateway, backlog=100, starts=[0.5 * i for i in range(20)])  # 20 starts in 10 s: 2/s
    refusal = gateway.early_refusal(10.0)
    assert refusal is not None and refusal.reason == "queue_full"  # no subscriber: no demand
    assert refusal.retry_after_s == 50.0
    measured(gateway, backlog=200, starts=[])
    assert gateway.early_refusal(10.0).retry_after_s == 60.0  # type: ignore[union-attr]  # clamped


def test_service_time_is_a_p90_of_recent_samples() -> None:
    meter = DrainMeter(samples=100)
    assert meter.service_time() == 0.0
    for i in range(100):
        meter.record_service(i / 100)
    assert meter.service_time() == 0.9
    for _ in range(100):  # the window moves: old samples leave
        meter.record_service(0.05)
    assert meter.service_time() == 0.05
