"""Open-loop arrival schedules (rxpipe.load._arrivals)."""

from __future__ import annotations

import random

import pytest

from rxpipe.load import arrival_times, rate_at


def test_a_seed_gives_the_same_schedule_and_every_time_is_in_the_window() -> None:
    first = arrival_times(10.0, (5.0, 5.0), rng=random.Random(7))
    assert first == arrival_times(10.0, (5.0, 5.0), rng=random.Random(7))
    assert first != arrival_times(10.0, (5.0, 5.0), rng=random.Random(8))
    assert first == sorted(first) and 0 <= first[0] and first[-1] < 10.0


def test_the_counts_follow_the_rate_integral() -> None:
    # constant 20/s for 500 s: 10,000 expected; ramp 1 -> 50 over 500 s: (1 + 50) / 2 * 500 = 12,750
    constant = arrival_times(500.0, (20.0, 20.0), rng=random.Random(0))
    ramp = arrival_times(500.0, (1.0, 50.0), rng=random.Random(0))
    assert abs(len(constant) - 10_000) < 300  # Poisson: sd 100
    assert abs(len(ramp) - 12_750) < 340  # sd 113
    # the ramp's first fifth carries (1 + 10.8) / 2 * 100 = 590 expected arrivals, the last 4,510
    assert abs(sum(1 for t in ramp if t < 100) - 590) < 80
    assert abs(sum(1 for t in ramp if t >= 400) - 4_510) < 210


def test_burstiness_above_one_is_more_regular() -> None:
    def gap_variance(burstiness: float) -> float:
        times = arrival_times(1000.0, (10.0, 10.0), burstiness, random.Random(3))
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        mean = sum(gaps) / len(gaps)
        return sum((g - mean) ** 2 for g in gaps) / len(gaps)

    # gamma(shape k, mean 0.1 s): variance 0.01 / k
    assert gap_variance(1.0) == pytest.approx(0.01, rel=0.1)
    assert gap_variance(4.0) == pytest.approx(0.0025, rel=0.1)


def test_rate_at_and_invalid_arguments() -> None:
    assert rate_at(0, 60, (1, 50)) == 1 and rate_at(30, 60, (1, 50)) == 25.5 and rate_at(60, 60, (1, 50)) == 50
    for args in ((0.0, (1.0, 1.0)), (1.0, (0.0, 1.0)), (1.0, (1.0, -1.0))):
        with pytest.raises(ValueError):
            arrival_times(*args)
    with pytest.raises(ValueError):
        arrival_times(1.0, (1.0, 1.0), burstiness=0)
