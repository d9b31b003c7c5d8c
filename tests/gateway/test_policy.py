"""Retry-After from the measured drain rate, and per-key buckets."""

from __future__ import annotations

import random
from collections import deque

import pytest

from rxpipe.gateway._policy import RESERVATION_MARGIN, DrainMeter, KeyBuckets, clamp_retry_after, retry_after_headers


def drained(meter: DrainMeter, every_s: float, n: int, waiting: int) -> None:
    """``n + waiting`` requests queued at 0.0 behind a busy engine; one finishes every ``every_s``
    seconds from then on and the next one waiting starts: ``waiting`` still wait at the end."""
    for _ in range(n + waiting):
        meter.record_admit(0.0)
    for i in range(1, n + 1):
        meter.record_finish(every_s * i)
        meter.record_start(every_s * i)


def test_drain_meter_rate_backlog_and_wait() -> None:
    meter = DrainMeter(horizon_s=10.0)
    assert meter.rate(0.0) is None and meter.estimated_wait(0.0) == 0.0
    for _ in range(5):
        meter.record_admit(1.0)
    assert meter.backlog == 5 and meter.estimated_wait(1.0) is None  # no rate measured yet
    meter.record_start(1.0)  # an idle engine takes one at once: no finish made its room
    meter.record_finish(1.5)  # it ends after 0.5 s; the next waiting one starts
    meter.record_start(1.5)
    assert meter.rate(1.5) is None  # one finish is no rate
    for t in (2.0, 2.5):
        meter.record_finish(t)
        meter.record_start(t)
    assert meter.backlog == 1
    assert meter.intervals == deque([(1.5, 0.5), (2.0, 0.5), (2.5, 0.5)])  # finishes while requests waited
    assert meter.rate(3.0) == pytest.approx(2.0)
    assert meter.estimated_wait(3.0) == pytest.approx(1 / 2.0)
    meter.record_abandon(3.0)
    assert meter.backlog == 0
    meter.record_abandon(3.0)  # never negative
    assert meter.backlog == 0
    assert meter.rate(20.0) is None  # finishes older than the horizon are forgotten


def test_the_drain_rate_counts_only_time_when_requests_wait() -> None:
    """A burst's slow tail and the quiet after it (requests starting as they arrive, into an empty
    queue) say how fast clients come, not how fast the engine drains: they leave the rate as the
    waiting requests measured it (issue 26: a second burst was promised times 2× too long)."""
    meter = DrainMeter(horizon_s=10.0)
    drained(meter, 0.1, 40, 0)
    assert meter.backlog == 0 and meter.rate(4.0) == pytest.approx(10.0)
    for t in (4.5, 5.5, 6.5, 7.5):  # the tail: one client at a time, started at once
        meter.record_finish(t)  # (nobody waits: the slot stays free)
        meter.record_admit(t)
        meter.record_start(t)
    assert meter.rate(9.0) == pytest.approx(10.0)  # not 44 starts in 9 s
    assert len(meter.intervals) == 40
    # a wait that begins with an idle engine: the starts that fill it make no sample, the clock
    # starts at the last of them; four sequences that end together are four finishes
    for _ in range(11):
        meter.record_admit(9.0)
    for t in (9.0, 9.0, 9.0004, 9.02):
        meter.record_start(t)
    for _ in range(4):
        meter.record_finish(9.4)
        meter.record_start(9.4)
    assert list(meter.intervals)[-4:] == [(9.4, pytest.approx(0.38)), (9.4, 0.0), (9.4, 0.0), (9.4, 0.0)]
    meter.record_finish(9.5)
    meter.record_start(9.5)
    for _ in range(2):  # the last ones waiting leave
        meter.record_abandon(9.8)
    assert meter.backlog == 0
    meter.record_finish(9.9)  # nobody waits: no sample
    meter.record_admit(10.0)  # a wait begins: the engine is full since its last finish (9.9)
    meter.record_finish(10.1)
    assert list(meter.intervals)[-2:] == [(9.5, pytest.approx(0.1)), (10.1, pytest.approx(0.2))]
    # one interval counts at most the p90 service time: no slot of a full engine runs longer
    for _ in range(20):
        meter.record_service(0.4)
    meter.record_start(10.1)
    meter.record_admit(30.0)
    meter.record_finish(30.5)
    assert list(meter.intervals)[-1] == (30.5, 0.4)


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


def test_deadline_refusal_from_estimated_wait() -> None:
    from rxpipe.gateway import Gateway

    gateway = Gateway(latency_budget_s=0.5)
    drained(gateway.meter, 0.1, 10, waiting=8)  # a finish every 0.1 s
    refusal = gateway.policy_refusal("anonymous", 1.0)
    assert refusal is not None
    assert (refusal.status, refusal.reason) == (429, "deadline")
    assert "estimated time to answer 0.88 s exceeds the latency budget 0.5 s" == refusal.message  # 0.8 × 1.1
    # The excess (0.38 s) is under the 1 s minimum; clients refused together are told times one
    # drain interval apart (plus a jitter of up to half one), not all the same (lock-step).
    rate = gateway.meter.rate(1.0)
    assert rate is not None
    interval = 1 / (rate * RESERVATION_MARGIN)
    second = gateway.policy_refusal("anonymous", 1.0)
    assert second is not None and second.reason == "deadline"
    assert 1.0 <= refusal.retry_after_s <= 1.0 + interval / 2
    assert 1.0 + interval <= second.retry_after_s <= 1.0 + 1.5 * interval
    for _ in range(5):
        gateway.meter.record_abandon(1.0)
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
    drained(meter, 0.5, 20, waiting=3)  # a finish every 0.5 s while requests waited: 2/s
    interval = 1 / (2 * RESERVATION_MARGIN)
    rng = NoJitter()
    # the k-th refusal gets (backlog + k) × interval: 3 queued ahead, then one slot each
    got = [meter.reserve(10.0, 0.0, 1.0, 60.0, rng) for _ in range(4)]
    assert got == pytest.approx([(3 + k) * interval for k in (1, 2, 3, 4)])
    # a second later the promises still stand: the next slot follows the last one promised
    assert meter.promised(11.0) == 4
    assert meter.reserve(11.0, 0.0, 1.0, 60.0, rng) == pytest.approx(10.0 + 8 * interval - 11.0)
    # a paused engine: never earlier than its remaining pause, and staggered after it
    assert meter.reserve(11.0, 30.0, 1.0, 60.0, rng) == pytest.approx(30.0)
    assert meter.reserve(11.0, 30.0, 1.0, 60.0, rng) == pytest.approx(30.0 + interval)
    # the horizon stops at the clamp
    assert [meter.reserve(11.0, 59.9, 1.0, 60.0, rng) for _ in range(3)] == pytest.approx([59.9, 60.0, 60.0])
    assert meter.book[-1] == 11.0 + 60.0
    # the slots before the pause are still free: the book has 9 clients away, not a chain to 60 s
    assert meter.reserve(11.0, 0.0, 1.0, 60.0, rng) == pytest.approx((3 + 10 + 1) * interval)
    # once the horizon is promised (60 s of slots: 3 queued, 11 away, the rest now), refusals are
    # spread over its last quarter (no lock-step there)
    fit = int(60.0 / interval) - 14
    values = [meter.reserve(11.0, 0.0, 1.0, 60.0, random.Random(i)) for i in range(fit + 20)]
    assert 0 <= values[fit - 1] - (14 + fit) * interval <= interval / 2
    saturated = values[fit:]
    assert all(45.0 <= v <= 60.0 for v in saturated) and len(set(saturated)) == 20
    assert sum(v < 60.0 - interval for v in saturated) >= 15  # spread, not all at the horizon
    # nobody queued: the first slot is at the 1 s minimum, then one per interval; the jitter
    # stays within half an interval (the order of promises is kept)
    jittered = DrainMeter()
    drained(jittered, 0.5, 20, waiting=0)  # 2/s at 10.0 s, nobody waiting after
    rng7 = random.Random(7)
    values = [jittered.reserve(10.0, 0.0, 1.0, 60.0, rng7) for _ in range(50)]
    assert all(0 <= v - (1.0 + k * interval) < interval / 2 for k, v in enumerate(values))
    assert len(set(values)) == 50


def test_without_a_drain_rate_refusals_are_spread_over_one_more_second() -> None:
    meter = DrainMeter()
    for _ in range(3):
        meter.record_admit(0.0)
    for _ in range(2):  # a burst of finishes is no rate
        meter.record_finish(0.0)
        meter.record_start(0.0)
    rng = random.Random(3)
    values = [meter.reserve(0.1, 0.0, 1.0, 60.0, rng) for _ in range(100)]
    assert all(1.0 <= v <= 2.0 for v in values) and len(set(values)) == 100
    # booked all the same: these clients are away until then (a rate measured meanwhile puts the
    # next refusal behind them)
    assert meter.book == sorted(0.1 + v for v in values) and meter.promised(1.0) == 100
    assert meter.promised(2.2) == 0  # and gone once their time passed
    assert 30.0 <= meter.reserve(0.1, 30.0, 1.0, 60.0, rng) <= 31.0  # an engine's pause is the floor


@pytest.mark.parametrize(("seconds", "header", "ms"), [(0.2, "1", "1000"), (1.0, "1", "1000"),
                                                       (1.0004, "2", "1001"), (7.25, "8", "7250")])
def test_retry_after_headers(seconds: float, header: str, ms: str) -> None:
    assert retry_after_headers(seconds) == {"Retry-After": header, "retry-after-ms": ms}


def test_queue_full_refusal_uses_the_reservation() -> None:
    from rxpipe.gateway import Gateway

    gateway = Gateway()
    gateway.policy.rng = NoJitter()
    drained(gateway.meter, 0.5, 20, waiting=100)  # 20 finishes in 10 s: 2/s
    refusal = gateway.early_refusal(10.0)
    assert refusal is not None and refusal.reason == "queue_full"  # no subscriber: no demand
    assert refusal.retry_after_s == pytest.approx(101 / (2 * RESERVATION_MARGIN))
    later = [gateway.early_refusal(10.0).retry_after_s for _ in range(8)]  # type: ignore[union-attr]
    assert later == pytest.approx([(101 + k) / (2 * RESERVATION_MARGIN) for k in range(1, 9)])


def test_service_time_is_a_p90_of_recent_samples() -> None:
    meter = DrainMeter(samples=100)
    assert meter.service_time() == 0.0
    for i in range(100):
        meter.record_service(i / 100)
    assert meter.service_time() == 0.9
    for _ in range(10):  # every sample counts at once: 0.00-0.09 left, ten of 2.0 came
        meter.record_service(2.0)
    assert meter.service_time() == 2.0
    for _ in range(100):  # the window moves: old samples leave
        meter.record_service(0.05)
    assert meter.service_time() == 0.05


def test_an_engine_paused_beyond_the_horizon_gets_the_horizon_exactly() -> None:
    meter = DrainMeter()
    drained(meter, 0.5, 20, waiting=0)
    # an hour's pause (a backend's Retry-After: 3600): the honest wait, capped by the edge's maximum,
    # every time, never spread below it; nothing is booked
    assert [meter.reserve(10.0, 3600.0, 1.0, 60.0, random.Random(i)) for i in range(5)] == [60.0] * 5
    assert meter.stagger(10.0, 3600.0, 1.0, 60.0, random.Random(0)) == 60.0
    assert meter.book == []
    assert DrainMeter().reserve(0.0, 3600.0, 1.0, 60.0, random.Random(0)) == 60.0  # no rate yet: the same


def test_the_engine_pause_is_the_longest_of_the_engines_that_tell_one() -> None:
    from types import SimpleNamespace

    from rxpipe.gateway import Gateway

    gateway = Gateway()
    assert gateway.engine_pause_s() == 0.0  # no engine
    gateway.policy.engines = [SimpleNamespace(retry_after_s=None), SimpleNamespace(),
                              SimpleNamespace(retry_after_s=0.0)]
    assert gateway.engine_pause_s() == 0.0
    gateway.engines.extend([SimpleNamespace(retry_after_s=2.5), SimpleNamespace(retry_after_s=1)])
    assert gateway.engine_pause_s() == 2.5


def test_a_rate_needs_two_waiting_intervals() -> None:
    meter = DrainMeter()
    meter.record_admit(0.0)
    assert meter.rate(1.0) is None
    meter.record_finish(0.5)  # one interval of 0.5 s: no rate yet
    assert meter.rate(1.0) is None and meter.estimated_wait(1.0) is None
    meter.record_finish(1.0)
    assert meter.rate(1.0) == 2 / 1.0
