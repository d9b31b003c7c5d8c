"""Property: for random demand schedules, every flow-control operator delivers no more than
requested, keeps its upstream bound, and loses nothing (buffer in "backpressure" mode).

Each example runs on the virtual clock: a random mix of downstream ``request(n)``, upstream
emissions (an honest hand-driven publisher emits only what it was asked for) and sleeps, then a
final ``request(UNBOUNDED)`` that must deliver every item, in order, and complete.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, run_virtual

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

step = st.one_of(
    st.tuples(st.just("request"), st.integers(1, 12)),
    st.tuples(st.just("emit"), st.integers(1, 30)),
    st.tuples(st.just("sleep"), st.sampled_from([0.0, 0.003, 0.01, 0.05, 0.2])),
)


@st.composite
def parameters(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    if kind == "buffer":
        return {"capacity": draw(st.integers(1, 20))}
    if kind == "limit_rate":
        high = draw(st.integers(1, 20))
        return {"high_tide": high, "low_tide": draw(st.integers(1, high))}
    if kind == "batch":
        params: dict[str, Any] = {"max_size": draw(st.integers(1, 6)),
                                  "max_delay_s": draw(st.sampled_from([None, 0.002, 0.02, 0.1]))}
        if draw(st.booleans()):
            params["weight"] = _weight
            params["max_weight"] = draw(st.integers(1, 8))
        return params
    return {"rate": draw(st.sampled_from([5.0, 20.0, 100.0, 1000.0])), "burst": draw(st.integers(1, 5))}


def _weight(x: int) -> int:
    return x % 4  # 0..3: zero-weight items too


def make(kind: str, params: dict[str, Any]) -> Any:
    return getattr(ops, kind)(**params)


def upstream_bound(kind: str, params: dict[str, Any]) -> int:
    """Items requested upstream and not yet delivered downstream may never exceed this."""
    if kind == "buffer":
        return params["capacity"]
    if kind == "limit_rate":
        return params["high_tide"]
    if kind == "batch":
        return 2 * params["max_size"]
    return UNBOUNDED  # rate_limit: bounded by downstream demand and burst instead (checked below)


def delivered_items(kind: str, values: list[Any]) -> list[Any]:
    return [x for b in values for x in b] if kind == "batch" else list(values)


def check(kind: str, params: dict[str, Any], ts: TestSubscriber[Any], pub: TestPublisher[int] | None,
          emitted: int) -> None:
    assert ts.error is None, ts.error
    assert len(ts.values) <= ts.requested  # batches for batch, items otherwise
    items = delivered_items(kind, ts.values)
    if pub is not None:
        assert pub.total_requested - len(items) <= upstream_bound(kind, params)
        if kind == "rate_limit":
            assert pub.total_requested - emitted <= params["burst"]  # owed <= tokens <= burst
            assert pub.total_requested <= ts.requested
    if kind == "batch":
        for b in ts.values:
            assert 1 <= len(b) <= params["max_size"]
            if "weight" in params and len(b) > 1:
                assert sum(map(_weight, b)) <= params["max_weight"]


def run(kind: str, params: dict[str, Any], source: str, n: int, steps: list[tuple[str, Any]]) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        times: list[float] = []
        pub: TestPublisher[int] | None = None
        sent = 0
        if source == "publisher":
            pub = TestPublisher[int]()
            upstream: rx.Flowable[int] = pub
        elif source == "range":
            upstream = rx.range(0, n)
        else:
            async def gen() -> AsyncIterator[int]:
                for i in range(n):
                    if i % 3 == 0:
                        await asyncio.sleep(0.004)
                    yield i

            upstream = rx.from_async_iterable(gen(), prefetch=4)
        ts = TestSubscriber[Any]()
        upstream.pipe(make(kind, params), ops.tap(lambda _: times.append(loop.time()))).subscribe(ts)

        def emit(k: int) -> None:
            nonlocal sent
            if pub is None:
                return
            k = min(k, pub.outstanding, n - sent)
            pub.emit(*range(sent, sent + k))
            sent += k
            if sent == n and pub.has_subscribers:
                pub.complete()

        if pub is not None and n == 0:
            pub.complete()
        for action, arg in steps:
            if action == "request":
                ts.request(arg)
            elif action == "emit":
                emit(arg)
            else:
                await asyncio.sleep(arg)
            check(kind, params, ts, pub, sent)
        ts.request(UNBOUNDED)
        deadline = loop.time() + 10_000
        while not ts.done and loop.time() < deadline:
            emit(n)
            check(kind, params, ts, pub, sent)
            await asyncio.sleep(0.001)
        check(kind, params, ts, pub, sent)
        assert ts.completed
        assert delivered_items(kind, ts.values) == list(range(n))  # nothing lost, order kept
        if kind == "rate_limit":
            start = times[0] if times else 0.0
            for k, t in enumerate(times):  # k + 1 items by time t: at most burst + rate * elapsed
                assert k + 1 <= params["burst"] + params["rate"] * (t - start) + 1e-6

    run_virtual(main())


def scenario(kind: str) -> Any:
    return given(parameters(kind), st.sampled_from(["publisher", "range", "async"]), st.integers(0, 60),
                 st.lists(step, max_size=25))


@SETTINGS
@scenario("buffer")
def test_buffer_backpressure(params: dict[str, Any], source: str, n: int, steps: list[tuple[str, Any]]) -> None:
    run("buffer", params, source, n, steps)


@SETTINGS
@scenario("limit_rate")
def test_limit_rate(params: dict[str, Any], source: str, n: int, steps: list[tuple[str, Any]]) -> None:
    run("limit_rate", params, source, n, steps)


@SETTINGS
@scenario("batch")
def test_batch(params: dict[str, Any], source: str, n: int, steps: list[tuple[str, Any]]) -> None:
    run("batch", params, source, n, steps)


@SETTINGS
@scenario("rate_limit")
def test_rate_limit(params: dict[str, Any], source: str, n: int, steps: list[tuple[str, Any]]) -> None:
    run("rate_limit", params, source, n, steps)
