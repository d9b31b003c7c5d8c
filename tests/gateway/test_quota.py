"""Per-tenant rpm/tpm: atomic check-and-reserve, reconcile, Retry-After and OpenAI's headers."""

from __future__ import annotations

import pytest

from rxpipe.engines import CompletionRequest
from rxpipe.gateway._quota import Quotas, go_duration
from rxpipe.gateway._tenants import Tenants


class Clock:
    """A hand-moved clock (seconds), standing in for ``loop.time``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (1, "1s"), (360, "6m0s"), (0.012, "12ms"), (90.5, "1m30.5s"), (3600, "1h0m0s"),
    (3723.25, "1h2m3.25s"), (0.0015, "1.5ms"), (2.5e-6, "2.5µs"), (1e-7, "100ns"), (59.999, "59.999s"),
    (-1.5, "-1.5s"),
])
def test_go_duration_matches_go_time_duration_string(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_tpm_2000_with_max_tokens_500_refuses_the_fourth_request_and_says_when_it_fits() -> None:
    clock = Clock()
    quotas = Quotas(Tenants.from_mapping({"t": {"tpm": 2000}}), clock)
    prompt = CompletionRequest(prompt="abcd", max_tokens=500).prompt_tokens
    assert prompt == 1  # the documented estimate: 1 token per 4 UTF-8 bytes → 501 reserved each
    remaining = []
    for _ in range(3):
        decision = quotas.reserve("t", prompt, 500)
        assert decision.allowed
        remaining.append(decision.headers["x-ratelimit-remaining-tokens"])
    assert remaining == ["1499", "998", "497"]
    fourth = quotas.reserve("t", prompt, 500)
    assert (fourth.allowed, fourth.limit, fourth.reservation) == (False, "tokens", None)
    assert fourth.retry_after_s == 0.12  # 4 missing tokens at 2000/60 per second
    assert fourth.headers == {"x-ratelimit-limit-tokens": "2000", "x-ratelimit-remaining-tokens": "497",
                              "x-ratelimit-reset-tokens": "45.09s"}  # 1503 tokens at 2000/min
    clock.now = 0.119
    assert not quotas.reserve("t", prompt, 500).allowed
    clock.now = 0.12
    fits = quotas.reserve("t", prompt, 500)
    assert fits.allowed and fits.headers == {
        "x-ratelimit-limit-tokens": "2000", "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "1m0s"}


def test_rpm_limit_headers_and_retry_after() -> None:
    clock = Clock()
    quotas = Quotas(Tenants.from_mapping({"t": {"rpm": 2}}), clock)
    assert quotas.headers("t") == {"x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "2",
                                   "x-ratelimit-reset-requests": "0s"}
    assert quotas.reserve("t", 10, 10).allowed
    assert quotas.reserve("t", 10, 10).allowed
    refused = quotas.reserve("t", 10, 10)
    assert (refused.allowed, refused.limit, refused.retry_after_s) == (False, "requests", 30.0)
    assert refused.headers == {"x-ratelimit-limit-requests": "2", "x-ratelimit-remaining-requests": "0",
                               "x-ratelimit-reset-requests": "1m0s"}
    clock.now = 12.5
    assert quotas.headers("t")["x-ratelimit-reset-requests"] == "47.5s"


def test_both_limits_are_taken_together_or_not_at_all() -> None:
    clock = Clock()
    quotas = Quotas(Tenants.from_mapping({"t": {"rpm": 10, "tpm": 100}}), clock)
    refused = quotas.reserve("t", 50, 51)  # tokens refuse: the request is not taken either
    assert refused.allowed is False and refused.retry_after_s is None  # 101 > 100: never fits
    assert quotas.headers("t")["x-ratelimit-remaining-requests"] == "10"
    assert quotas.reserve("t", 50, 50).allowed
    refused = quotas.reserve("t", 1, 1)
    assert (refused.limit, refused.retry_after_s) == ("tokens", 1.2)  # 2 tokens at 100/60 per s
    assert quotas.headers("t")["x-ratelimit-remaining-requests"] == "9"


def test_reconcile_refunds_unused_tokens_and_charges_a_debt_never_shown_negative() -> None:
    clock = Clock()
    quotas = Quotas(Tenants.from_mapping({"t": {"tpm": 1000}}), clock)
    first = quotas.reserve("t", 100, 400).reservation
    second = quotas.reserve("t", 100, 400).reservation
    assert first is not None and second is not None
    quotas.reconcile(first, 150)  # used 150 of 500: 350 back
    assert quotas.headers("t")["x-ratelimit-remaining-tokens"] == "350"
    quotas.reconcile(first, 0)  # settled once
    assert quotas.headers("t")["x-ratelimit-remaining-tokens"] == "350"
    quotas.reconcile(second, 900)  # 400 more than reserved: a 50-token debt
    assert quotas.headers("t") == {"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "0",
                                   "x-ratelimit-reset-tokens": "1m3s"}  # 1050 tokens to refill
    assert quotas.reserve("t", 1, 1).retry_after_s == pytest.approx(3.12, abs=1e-12)  # 52 tokens


def test_release_gives_everything_back_capped_at_the_limit() -> None:
    clock = Clock()
    quotas = Quotas(Tenants.from_mapping({"t": {"rpm": 5, "tpm": 1000}}), clock)
    reservation = quotas.reserve("t", 10, 90).reservation
    assert reservation is not None
    clock.now = 60.0  # refilled meanwhile: the give-back does not overfill
    quotas.release(reservation)
    assert quotas.headers("t") == {
        "x-ratelimit-limit-requests": "5", "x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "0s",
        "x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "1000", "x-ratelimit-reset-tokens": "0s"}


def test_parallel_reservations_never_overshoot() -> None:
    clock = Clock()
    quotas = Quotas(Tenants.from_mapping({"t": {"tpm": 10_000}}), clock)
    admitted = [quotas.reserve("t", 7, 300).allowed for _ in range(100)]  # 100 requests in one instant
    assert admitted.count(True) == 10_000 // 307 == 32
    assert quotas.headers("t")["x-ratelimit-remaining-tokens"] == str(10_000 - 32 * 307)


def test_tenants_without_limits_are_always_allowed_and_get_no_headers() -> None:
    quotas = Quotas(Tenants.from_mapping({"t": {"tpm": 10}}), Clock())
    decision = quotas.reserve("default", 10**6, 10**6)
    assert decision.allowed and decision.headers == {}
    assert quotas.reserve("unknown", 1, 1).allowed


def test_a_reload_keeps_the_level_of_unchanged_limits_and_starts_changed_ones_full() -> None:
    clock = Clock()
    quotas = Quotas(Tenants.from_mapping({"a": {"tpm": 100}, "b": {"tpm": 100}}), clock)
    quotas.reserve("a", 50, 0)
    quotas.reserve("b", 50, 0)
    new = quotas.updated(Tenants.from_mapping({"a": {"tpm": 100}, "b": {"tpm": 200}}))
    assert new.headers("a")["x-ratelimit-remaining-tokens"] == "50"
    assert new.headers("b")["x-ratelimit-remaining-tokens"] == "200"
    assert quotas.headers("b")["x-ratelimit-remaining-tokens"] == "50"  # the old object is untouched
