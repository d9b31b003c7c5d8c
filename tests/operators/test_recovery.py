"""catch and retry (operators/_recovery.py): differential against reactivex 6.1; the continuation
inherits the outstanding demand and nothing delivered is requested again (exact requests, and
under random demand); cancel reaches the current source; retry() forever leaves the loop free.
"""

from __future__ import annotations

import asyncio
import random
import zlib
from typing import Any, Callable

import pytest
import reactivex
import reactivex.operators as rxo

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber

from .differential import Case, cases, through_reactivex, through_rxpipe
from .seeded_pairs import check_seeded_cases

Pair = tuple[Any, Any]


class Failed(Exception):
    """A continuation's own error."""


def _refuse(error: BaseException, source: Any) -> Any:
    raise ValueError(f"handler refused {error}")


#: name -> seeded parameters -> (rxpipe operator, reactivex operator) with the same arguments
PAIRS: dict[str, Callable[[random.Random], Pair]] = {
    "catch_flowable": lambda r: (ops.catch(rx.from_iterable([100, 101])),
                                 rxo.catch(reactivex.from_iterable([100, 101]))),
    "catch_function": lambda r: (ops.catch(lambda e, src: rx.just(len(str(e)))),
                                 rxo.catch(lambda e, src: reactivex.just(len(str(e))))),
    "catch_resubscribes": lambda r: (ops.catch(lambda e, src: src), rxo.catch(lambda e, src: src)),
    "catch_handler_raises": lambda r: (ops.catch(_refuse), rxo.catch(_refuse)),
    "catch_continuation_fails": lambda r: (ops.catch(lambda e, src: rx.error(Failed("second"))),
                                           rxo.catch(lambda e, src: reactivex.throw(Failed("second")))),
    "retry": lambda r: (lambda n: (ops.retry(n), rxo.retry(n)))(r.randint(1, 4)),
}
CASES = 12


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_equal_to_reactivex_on_every_seeded_input(name: str) -> None:
    check_seeded_cases(name, PAIRS[name], CASES)


def test_retry_forever_equal_to_reactivex_on_inputs_that_end() -> None:
    compared = [case for case in cases(seed=zlib.crc32(b"retry_forever"), count=CASES) if case.error is None]
    assert len(compared) >= 6
    for case in compared:
        assert through_rxpipe(ops.retry(), case) == through_reactivex(rxo.retry(), case), case


def test_retry_over_a_source_failing_at_subscribe_signals_the_last_error() -> None:
    errors = iter([Failed("first"), Failed("second"), Failed("third")])
    notes = through_rxpipe(ops.retry(3), Case(()), source=rx.defer(lambda: rx.error(next(errors))))
    assert notes == [("E", "Failed", "third")]


def test_retry_0_is_refused_where_reactivex_completes_without_subscribing() -> None:
    with pytest.raises(ValueError, match="retry_count"):
        ops.retry(0)
    assert through_reactivex(rxo.retry(0), Case((1, 2))) == [("C",)]


# -- catch: demand and cancellation -----------------------------------------------------------------
def test_the_continuation_inherits_the_outstanding_demand() -> None:
    pub, continuation = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=5)
    pub.pipe(ops.catch(continuation)).subscribe(ts)
    pub.emit(1, 2)
    pub.error(RuntimeError("boom"))
    assert continuation.requests == [3] and pub.requests == [5]
    continuation.emit(3, 4, 5)
    ts.request(1)
    assert continuation.requests == [3, 1]
    continuation.emit(6).complete()
    assert ts.values == [1, 2, 3, 4, 5, 6] and ts.completed


def test_the_handler_gets_the_error_and_the_upstream_flowable() -> None:
    seen: list[Any] = []
    failure = RuntimeError("boom")

    def handler(error: BaseException, source: Any) -> Any:
        seen.extend([error, source])
        return rx.just("recovered")

    pub = TestPublisher[str]()
    ts = TestSubscriber[str](initial_request=UNBOUNDED)
    pub.pipe(ops.catch(handler)).subscribe(ts)
    pub.error(failure)
    assert seen == [failure, pub] and ts.values == ["recovered"] and ts.completed


def test_a_raising_handler_signals_its_error_without_logging_it(rx_errors: Any) -> None:
    pub = TestPublisher[str]()
    ts = TestSubscriber[str](initial_request=1)
    pub.pipe(ops.catch(_refuse)).subscribe(ts)
    pub.error(RuntimeError("boom"))
    assert isinstance(ts.error, ValueError) and str(ts.error) == "handler refused boom"
    assert len(rx_errors) == 0


def test_a_handler_returning_no_flowable_signals_type_error() -> None:
    for result in (None, [1, 2], reactivex.just(1)):
        pub, ts = TestPublisher[int](), TestSubscriber[int](initial_request=1)
        pub.pipe(ops.catch(lambda e, src, r=result: r)).subscribe(ts)
        pub.error(RuntimeError("boom"))
        assert isinstance(ts.error, TypeError) and "Flowable" in str(ts.error)
    with pytest.raises(TypeError, match="from_observable"):
        ops.catch(reactivex.just(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ops.catch(3)  # type: ignore[arg-type]


def test_cancel_reaches_the_current_source() -> None:
    pub, continuation = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=2)
    pub.pipe(ops.catch(continuation)).subscribe(ts)
    ts.cancel()
    assert pub.cancelled and not continuation.has_subscribers
    pub, continuation = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int](initial_request=2)
    pub.pipe(ops.catch(continuation)).subscribe(ts)
    pub.error(RuntimeError("boom"))
    ts.cancel()
    assert continuation.cancelled


@pytest.mark.parametrize("seed", range(12))
def test_random_demand_across_the_switch(seed: int) -> None:
    rng = random.Random(seed)
    pub, continuation = TestPublisher[int](), TestPublisher[int]()
    ts = TestSubscriber[int]()
    pub.pipe(ops.catch(continuation)).subscribe(ts)
    before, after = rng.randint(0, 20), rng.randint(0, 20)
    sent = 0
    current = pub
    owed_at_switch = None
    while not ts.done:
        if rng.random() < 0.4:
            ts.request(rng.choice((1, 2, 3, 7)))
        elif current is pub and sent == before and owed_at_switch is None:
            owed_at_switch = ts.requested - len(ts.values)
            pub.error(RuntimeError("switch"))
            current = continuation
        elif current.outstanding and sent < before + after:
            current.emit(sent)
            sent += 1
        elif current is continuation and sent == before + after:
            continuation.complete()
        assert len(ts.values) <= ts.requested
        owed = ts.requested - len(ts.values)
        if owed and not ts.done and sent < before + after and not (current is pub and sent == before):
            assert current.outstanding > 0, "stalled"
    assert ts.values == list(range(before + after)) and ts.completed
    assert continuation.requests[:1] == ([owed_at_switch] if owed_at_switch else [])
    assert continuation.total_requested <= ts.requested - before  # nothing delivered is asked again


# -- retry: demand, resubscription, cancellation -------------------------------------------------------
class Subscriptions:
    """A source whose every subscription is a new TestPublisher (kept in ``pubs``)."""

    def __init__(self) -> None:
        self.pubs: list[TestPublisher[int]] = []
        self.flowable = rx.defer(self._next)

    def _next(self) -> TestPublisher[int]:
        self.pubs.append(TestPublisher[int]())
        return self.pubs[-1]


def test_retry_asks_each_new_subscription_only_for_the_outstanding_demand() -> None:
    src = Subscriptions()
    ts = TestSubscriber[int](initial_request=5)
    src.flowable.pipe(ops.retry(3)).subscribe(ts)  # off a loop: re-subscribes at once
    src.pubs[0].emit(1, 2).error(RuntimeError("first"))
    assert [p.requests for p in src.pubs] == [[5], [3]]
    src.pubs[1].emit(1).error(RuntimeError("second"))
    assert [p.requests for p in src.pubs] == [[5], [3], [2]]
    third = RuntimeError("third")
    src.pubs[2].error(third)
    assert ts.error is third and ts.values == [1, 2, 1] and len(src.pubs) == 3


async def test_retry_re_subscribes_on_the_next_loop_turn_and_a_cancel_stops_it() -> None:
    src = Subscriptions()
    ts = TestSubscriber[int](initial_request=2)
    src.flowable.pipe(ops.retry()).subscribe(ts)
    src.pubs[0].error(RuntimeError("boom"))
    assert len(src.pubs) == 1  # not from inside the failing signal
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(src.pubs) == 2 and src.pubs[1].requests == [2]
    src.pubs[1].error(RuntimeError("again"))
    ts.cancel()  # while the re-subscription is pending
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(src.pubs) == 2 and ts.error is None


async def test_retry_forever_over_a_source_failing_at_once_leaves_the_loop_free() -> None:
    subscriptions = 0

    def failing() -> Any:
        nonlocal subscriptions
        subscriptions += 1
        return rx.error(RuntimeError("down"))

    ticks = 0

    async def other_work() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    worker = asyncio.create_task(other_work())
    ts = TestSubscriber[int](initial_request=1)
    rx.defer(failing).pipe(ops.retry()).subscribe(ts)
    for _ in range(50):
        await asyncio.sleep(0)
    ts.cancel()
    seen = subscriptions
    for _ in range(10):
        await asyncio.sleep(0)
    worker.cancel()
    assert 10 < seen <= 51 and ticks >= 40 and subscriptions == seen and ts.error is None


def test_retry_checks_its_count() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="retry_count"):
            ops.retry(bad)  # type: ignore[arg-type]
