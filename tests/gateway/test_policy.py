"""Retry-After from the measured drain rate, and per-key buckets."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING

import pytest

from rxpipe.gateway._policy import RESERVATION_MARGIN, DrainMeter, KeyBuckets, clamp_retry_after, retry_after_headers

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
    assert (refusal.status, refusal.reason) == (429, "deadline")
    assert "estimated time to answer 0.88 s exceeds the latency budget 0.5 s" == refusal.message  # 0.8 × 1.1
    # The excess (0.38 s) is under the 1 s minimum; clients refused together are told times one
    # drain interval apart (plus a jitter of up to half one), not all the same (lock-step).
    rate = gateway.meter.rate(1.0)
    assert rate is not None
    interval = 1 / (rate * 0.9)
    second = gateway.policy_refusal("anonymous", 1.0)
    assert second is not None and second.reason == "deadline"
    assert 1.0 <= refusal.retry_after_s <= 1.0 + interval / 2
    assert 1.0 + interval <= second.retry_after_s <= 1.0 + 1.5 * interval
    for _ in range(5):
        gateway.meter.record_abandon()
    assert gateway.policy_refusal("anonymous", 1.0) is None  # 3 / 10 per s × 1.1 = 0.33 s: within budget
    for service in [0.1] * 9 + [0.3]:
        gateway.meter.record_service(service)
    assert gateway.meter.service_time() == 0.3  # p90 of ten samples
    refusal = gateway.policy_refusal("anonymous", 1.0)  # 0.33 + 0.3 = 0.63 s > 0.5 s
    assert refusal is not None and refusal.message.startswith("estimated time to answer 0.63 s")


class NoJitter(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return a


def test_reservations_stagger_refusals_at_the_drain_interval() -> None:
    meter = DrainMeter()
    for i in range(20):  # 20 starts in 10 s: 2/s, so one admission slot every 1 / (2 × 0.9) s
        meter.record_admit()
        meter.record_start(0.5 * i)
    for _ in range(3):
        meter.record_admit()
    interval = 1 / (2 * RESERVATION_MARGIN)
    rng = NoJitter()
    # the k-th refusal gets (backlog + k) × interval: 3 queued ahead, then one slot each
    got = [meter.reserve(10.0, 0.0, 1.0, 60.0, rng) for _ in range(4)]
    assert got == pytest.approx([(3 + k) * interval for k in (1, 2, 3, 4)])
    # a second later the promises still stand: the next slot follows the last one promised (at
    # the rate measured now: the 10 s horizon keeps the 18 starts from 1.0 s on, 1.8/s)
    later = 1 / (18 / 10 * RESERVATION_MARGIN)
    assert meter.reserve(11.0, 0.0, 1.0, 60.0, rng) == pytest.approx(10.0 + 7 * interval + later - 11.0)
    # a paused engine: never earlier than its remaining pause, and staggered after it
    assert meter.reserve(11.0, 30.0, 1.0, 60.0, rng) == pytest.approx(30.0)
    assert meter.reserve(11.0, 30.0, 1.0, 60.0, rng) == pytest.approx(30.0 + later)
    # the horizon stops at the clamp
    assert [meter.reserve(11.0, 59.9, 1.0, 60.0, rng) for _ in range(3)] == pytest.approx([59.9, 60.0, 60.0])
    assert meter.reserved_until == 11.0 + 60.0
    # once the horizon is promised, refusals are spread over its last quarter (no lock-step there)
    saturated = [meter.reserve(11.0, 0.0, 1.0, 60.0, random.Random(i)) for i in range(20)]
    assert all(45.0 <= v <= 60.0 for v in saturated) and len(set(saturated)) == 20
    # nobody queued: the first slot is at the 1 s minimum, then one per interval; the jitter
    # stays within half an interval (the order of promises is kept)
    jittered = DrainMeter()
    jittered.starts.extend(meter.starts)  # 18 starts from 1.0 s to 9.5 s: 2/s at 10.0 s
    rng7 = random.Random(7)
    values = [jittered.reserve(10.0, 0.0, 1.0, 60.0, rng7) for _ in range(50)]
    assert all(0 <= v - (1.0 + k * interval) < interval / 2 for k, v in enumerate(values))
    assert len(set(values)) == 50


def test_without_a_drain_rate_refusals_are_spread_over_one_more_second() -> None:
    meter = DrainMeter()
    meter.record_start(0.0)
    meter.record_start(0.0)  # a burst of starts is no rate
    rng = random.Random(3)
    values = [meter.reserve(0.1, 0.0, 1.0, 60.0, rng) for _ in range(100)]
    assert all(1.0 <= v <= 2.0 for v in values) and len(set(values)) == 100
    assert meter.reserved_until == -math.inf  # nothing promised
    assert 30.0 <= meter.reserve(0.1, 30.0, 1.0, 60.0, rng) <= 31.0  # an engine's pause is the floor


@pytest.mark.parametrize(("seconds", "header", "ms"), [(0.2, "1", "1000"), (1.0, "1", "1000"),
                                                       (1.0004, "2", "1001"), (7.25, "8", "7250")])
def test_retry_after_headers(seconds: float, header: str, ms: str) -> None:
    assert retry_after_headers(seconds) == {"Retry-After": header, "retry-after-ms": ms}


def test_queue_full_refusal_uses_the_reservation() -> None:
    from rxpipe.gateway import Gateway

    gateway = Gateway()
    gateway._rng = NoJitter()
    measured(gateway, backlog=100, starts=[0.5 * i for i in range(20)])  # 20 starts in 10 s: 2/s
    refusal = gateway.early_refusal(10.0)
    assert refusal is not None and refusal.reason == "queue_full"  # no subscriber: no demand
    assert refusal.retry_after_s == pytest.approx(101 / (2 * RESERVATION_MARGIN))
    later = [gateway.early_refusal(10.0).retry_after_s for _ in range(8)]  # type: ignore[union-attr]
    assert later == pytest.approx([(101 + k) / (2 * RESERVATION_MARGIN) for k in range(1, 7)] + [60.0] * 2)


def test_service_time_is_a_p90_of_recent_samples() -> None:
    meter = DrainMeter(samples=100)
    assert meter.service_time() == 0.0
    for i in range(100):
        meter.record_service(i / 100)
    assert meter.service_time() == 0.9
    for _ in range(100):  # the window moves: old samples leave
        meter.record_service(0.05)
    assert meter.service_time() == 0.05


def test_an_engine_paused_beyond_the_horizon_gets_the_horizon_exactly() -> None:
    meter = DrainMeter()
    for i in range(20):
        meter.record_admit()
        meter.record_start(0.5 * i)
    before = meter.reserved_until
    # an hour's pause (a backend's Retry-After: 3600): the honest wait, capped by the edge's maximum,
    # every time, never spread below it; nothing is booked
    assert [meter.reserve(10.0, 3600.0, 1.0, 60.0, random.Random(i)) for i in range(5)] == [60.0] * 5
    assert meter.stagger(10.0, 3600.0, 1.0, 60.0, random.Random(0)) == 60.0
    assert meter.reserved_until == before
    assert DrainMeter().reserve(0.0, 3600.0, 1.0, 60.0, random.Random(0)) == 60.0  # no rate yet: the same
