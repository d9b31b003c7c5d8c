"""rxpipe._loop_metrics: the lock-free families expose exactly what prometheus_client's own do."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from rxpipe._loop_metrics import LoopCounter, LoopHistogram

BUCKETS = (0.005, 0.01, 0.1, 1.0, 60.0)
VALUES = (0.0, 0.005, 0.0051, 0.01, 0.5, 1.0, 59.9, 60.0, 61.0, 1e9)


def _exposition(registry: CollectorRegistry) -> list[str]:
    return [line for line in generate_latest(registry).decode().splitlines() if "_created" not in line]


def test_the_exposition_equals_prometheus_clients_counter_and_histogram() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counter = LoopCounter("t_requests", "Requests.", ["route", "code"], registry=ours)
    reference_counter = Counter("t_requests", "Requests.", ["route", "code"], registry=theirs)
    histogram = LoopHistogram("t_seconds", "Durations.", buckets=BUCKETS, registry=ours)
    reference_histogram = Histogram("t_seconds", "Durations.", buckets=BUCKETS, registry=theirs)
    for route, code, times in (("/a", 200, 3), ("/b", 429, 1), ("/a", 429, 2)):
        for _ in range(times):
            counter.labels(route=route, code=code).inc()
            reference_counter.labels(route=route, code=str(code)).inc()
    counter.labels("/b", 200)  # touched, never counted: the series exists at 0, as with .labels()
    reference_counter.labels("/b", "200")
    for value in VALUES:
        histogram.observe(value)
        reference_histogram.observe(value)
    assert _exposition(ours) == _exposition(theirs)
    assert ours.get_sample_value("t_requests_total", {"route": "/a", "code": "200"}) == 3.0
    assert ours.get_sample_value("t_seconds_bucket", {"le": "0.005"}) == 2.0  # le is inclusive
    assert ours.get_sample_value("t_seconds_bucket", {"le": "60.0"}) == 8.0
    assert ours.get_sample_value("t_seconds_count") == 10.0
    assert ours.get_sample_value("t_seconds_sum") == pytest.approx(sum(VALUES))


def test_a_nan_observation_is_in_no_bucket_as_with_prometheus_client() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    histogram = LoopHistogram("t_nan", "NaN.", buckets=(1.0,), registry=ours)
    reference = Histogram("t_nan", "NaN.", buckets=(1.0,), registry=theirs)
    for value in (0.5, float("nan"), 2.0):
        histogram.observe(value)
        reference.observe(value)
    assert _exposition(ours) == _exposition(theirs)
    assert ours.get_sample_value("t_nan_bucket", {"le": "1.0"}) == 1.0
    assert ours.get_sample_value("t_nan_count") == 2.0


def test_labelled_histogram_children_are_separate_series() -> None:
    registry = CollectorRegistry()
    histogram = LoopHistogram("t_step", "Steps.", ["engine"], buckets=(1, 2), registry=registry)
    histogram.labels(engine="a").observe(1)
    histogram.labels("b").observe(3)
    histogram.labels("b").observe(2)
    value = registry.get_sample_value
    assert [value("t_step_bucket", {"engine": "a", "le": le}) for le in ("1.0", "2.0", "+Inf")] == [1, 1, 1]
    assert [value("t_step_bucket", {"engine": "b", "le": le}) for le in ("1.0", "2.0", "+Inf")] == [0, 1, 2]
    assert value("t_step_sum", {"engine": "b"}) == 5.0


def test_bad_use_is_refused_with_a_clear_error() -> None:
    registry = CollectorRegistry()
    counter = LoopCounter("t_c", "C.", ["reason"], registry=registry)
    with pytest.raises(ValueError, match="can only grow"):
        counter.labels("x").inc(-1)
    with pytest.raises(ValueError, match="do not match"):
        counter.labels(other="x")
    with pytest.raises(ValueError, match="2 label values"):
        counter.labels("x", "y")
    with pytest.raises(TypeError, match="use labels"):
        counter.inc()
    with pytest.raises(ValueError, match="ascending"):
        LoopHistogram("t_h", "H.", buckets=(2, 1), registry=registry)
    plain = LoopCounter("t_plain_total", "Plain.", registry=registry)
    plain.inc(2)
    assert registry.get_sample_value("t_plain_total") == 2.0  # a _total suffix is not doubled


def test_a_scrape_on_another_thread_sees_buckets_and_count_of_one_moment() -> None:
    registry = CollectorRegistry()
    histogram = LoopHistogram("t_race", "Race.", buckets=(0.5,), registry=registry)
    stop = threading.Event()
    seen: list[tuple[float, float]] = []

    def scrape() -> None:
        while not stop.is_set():
            for family in registry.collect():
                samples = {s.name + s.labels.get("le", ""): s.value for s in family.samples}
                seen.append((samples["t_race_bucket+Inf"], samples["t_race_count"]))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    for i in range(200_000):
        histogram.observe(i % 2)
    stop.set()
    scraper.join()
    assert seen and all(inf == count for inf, count in seen)
    assert registry.get_sample_value("t_race_bucket", {"le": "0.5"}) == 100_000.0
    assert registry.get_sample_value("t_race_count") == 200_000.0
