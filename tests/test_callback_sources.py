"""rx.start_async, rx.to_async, rx.from_callback (DESIGN §3, "The kit, third round"): reactivex
6.1's values for the synchronous cases, and the asyncio-native rules (a shared run begun at the
first subscription, blocking work in ``asyncio.to_thread``, a callback from any thread), demand,
cancel, errors."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
from typing import Any, Callable

import pytest
import reactivex

import rxpipe as rx
from rxpipe import UNBOUNDED
from rxpipe.testing import TestSubscriber, run_virtual

from .operators.differential import Case, note_of_error, through_reactivex, through_rxpipe

NONE = Case(())


def boom(*args: Any) -> Any:
    raise ValueError("boom")


# -- from_callback -------------------------------------------------------------------------------------
def _callback_function(rng: random.Random) -> tuple[Callable[..., None], tuple[Any, ...]]:
    """A seeded callback-style function: calls its callback with 1-3 values derived from its
    arguments, or raises."""
    width = rng.choice((1, 1, 2, 3))
    fails = rng.random() < 0.2

    def func(*args: Any) -> None:
        *given, callback = args
        if fails:
            raise ValueError(f"func({given})")
        callback(*[sum(given) + k for k in range(width)])

    return func, tuple(rng.randint(0, 9) for _ in range(rng.randint(0, 3)))


@pytest.mark.parametrize("with_mapper", [False, True])
def test_from_callback_equal_to_reactivex_on_seeded_functions(with_mapper: bool) -> None:
    for seed in range(120):
        rng = random.Random(seed)
        func, args = _callback_function(rng)
        mapper = (lambda values: {"sum": sum(values), "n": len(values)}) if with_mapper else None
        got = through_rxpipe(lambda _, f=func, m=mapper, a=args: rx.from_callback(f, m)(*a), NONE)
        expected = through_reactivex(lambda _, f=func, m=mapper, a=args: reactivex.from_callback(f, m)(*a), NONE)
        assert got == expected, seed


def test_from_callback_value_waits_for_demand_and_each_subscription_calls_again() -> None:
    calls: list[tuple[Any, ...]] = []

    def func(x: int, callback: Callable[..., None]) -> None:
        calls.append((x,))
        callback(x * 2)
        callback(x * 3)  # a second call: ignored

    source = rx.from_callback(func)(5)
    assert calls == []  # cold
    ts = TestSubscriber[int]()
    source.subscribe(ts)
    assert calls == [(5,)] and ts.values == [] and not ts.done
    ts.request(3)
    assert ts.values == [10] and ts.completed
    ts = TestSubscriber[int](initial_request=1)
    source.subscribe(ts)
    assert calls == [(5,), (5,)] and ts.values == [10] and ts.completed


@pytest.mark.loops("asyncio", "uvloop")
async def test_from_callback_a_callback_from_another_thread_hops_to_the_loop() -> None:
    loop_thread = threading.get_ident()
    seen: list[int] = []

    def func(x: int, callback: Callable[..., None]) -> None:
        threading.Thread(target=callback, args=(x, x + 1)).start()

    class Recorder(TestSubscriber[Any]):
        __test__ = False

        def on_next(self, item: Any) -> None:
            seen.append(threading.get_ident())
            super().on_next(item)

    ts = Recorder(initial_request=1)
    rx.from_callback(func)(1).subscribe(ts)
    await ts.await_done(5.0)
    assert ts.values == [[1, 2]] and ts.completed and seen == [loop_thread]


def test_from_callback_cancel_ignores_a_later_callback_and_errors_are_signalled() -> None:
    held: list[Callable[..., None]] = []
    ts = TestSubscriber[Any](initial_request=1)
    rx.from_callback(lambda cb: held.append(cb))().subscribe(ts)
    ts.cancel()
    held[0]("late")
    assert ts.values == [] and not ts.done
    ts = TestSubscriber[Any](initial_request=1)
    rx.from_callback(lambda cb: cb())().subscribe(ts)
    assert isinstance(ts.error, TypeError) and "without arguments" in str(ts.error)
    ts = TestSubscriber[Any](initial_request=1)
    rx.from_callback(lambda cb: cb(None))().subscribe(ts)
    assert isinstance(ts.error, TypeError)  # §2.13
    ts = TestSubscriber[Any](initial_request=1)
    rx.from_callback(lambda cb: cb(1), boom)().subscribe(ts)
    assert isinstance(ts.error, ValueError)
    ts = TestSubscriber[Any]()
    rx.from_callback(lambda cb: cb(1))().subscribe(ts)
    ts.request(-1)
    assert isinstance(ts.error, ValueError)  # §3.9
    with pytest.raises(TypeError):
        rx.from_callback(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        rx.from_callback(boom, mapper=5)  # type: ignore[arg-type]


# -- start_async -----------------------------------------------------------------------------------------
@pytest.mark.virtual
async def test_start_async_runs_once_at_the_first_subscription_and_shares_its_result() -> None:
    calls: list[float] = []

    async def work() -> str:
        calls.append(asyncio.get_running_loop().time())
        await asyncio.sleep(2.0)
        return "done"

    source = rx.start_async(work)
    await asyncio.sleep(1.0)
    assert calls == []  # begun at the first subscription (reactivex: at the call)
    first, second = TestSubscriber[str](), TestSubscriber[str](initial_request=1)
    source.subscribe(first)
    source.subscribe(second)
    await second.await_done(10.0)
    assert calls == [1.0] and second.values == ["done"] and first.values == []  # first asked nothing yet
    first.request(1)
    assert first.values == ["done"] and first.completed
    assert await source.to_list() == ["done"] and calls == [1.0]


@pytest.mark.virtual
async def test_start_async_takes_any_awaitable_and_a_cancel_stops_listening_only() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    source = rx.start_async(lambda: future)
    ts = TestSubscriber[int](initial_request=1)
    source.subscribe(ts)
    ts.cancel()
    assert not future.cancelled()
    future.set_result(3)
    assert await source.to_list() == [3]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert await rx.start_async(lambda: pool.submit(lambda: 4)).to_list() == [4]


@pytest.mark.virtual
async def test_start_async_errors() -> None:
    async def fails() -> int:
        raise KeyError("inside")

    with pytest.raises(KeyError):
        await rx.start_async(fails).to_list()
    raising = rx.start_async(boom)
    for _ in range(2):  # the call raised once: every subscriber hears of it
        with pytest.raises(ValueError, match="boom"):
            await raising.to_list()
    with pytest.raises(TypeError, match="not an awaitable"):
        await rx.start_async(lambda: 5).to_list()  # type: ignore[arg-type, return-value]

    async def nothing() -> None:
        return None

    with pytest.raises(TypeError, match=r"start_async\(\): the awaitable's result is None"):
        await rx.start_async(nothing).to_list()

    def side_effect_only(x: int) -> None:
        assert x == 1

    with pytest.raises(TypeError, match=r"to_async\(\): side_effect_only's result is None"):
        await rx.to_async(side_effect_only)(1).to_list()
    with pytest.raises(TypeError):
        rx.start_async(5)  # type: ignore[arg-type]


def test_start_async_off_a_loop_signals_runtime_error() -> None:
    async def work() -> int:
        return 1

    ts = TestSubscriber[int](initial_request=1)
    rx.start_async(work).subscribe(ts)
    assert isinstance(ts.error, RuntimeError) and "start_async() must be subscribed" in str(ts.error)


def test_start_async_equal_to_reactivex_for_a_value_and_an_error() -> None:
    async def value() -> int:
        return 42

    async def fails() -> int:
        raise KeyError("inside")

    async def theirs(function_async: Callable[[], Any]) -> list[Any]:
        notes: list[Any] = []
        done = asyncio.Event()
        reactivex.start_async(lambda: asyncio.ensure_future(function_async())).subscribe(  # it needs a future
            on_next=lambda v: notes.append(("N", v)),
            on_error=lambda e: (notes.append(note_of_error(e)), done.set()),
            on_completed=lambda: (notes.append(("C",)), done.set()),
        )
        await asyncio.wait_for(done.wait(), 10.0)
        return notes

    for function_async in (value, fails):
        ours = through_rxpipe(lambda _, f=function_async: rx.start_async(f), NONE)  # type: ignore[misc]
        assert ours == asyncio.run(theirs(function_async))
    assert through_rxpipe(lambda _: rx.start_async(boom), NONE) == through_reactivex(
        lambda _: reactivex.start_async(boom), NONE
    )  # the call itself raising


# -- to_async ---------------------------------------------------------------------------------------------
@pytest.mark.loops("asyncio", "uvloop")
async def test_to_async_runs_func_in_a_thread_once_per_call_shared_by_its_subscribers() -> None:
    threads: list[int] = []

    def add(x: int, y: int) -> int:
        threads.append(threading.get_ident())
        return x + y

    add_async = rx.to_async(add)
    seven = add_async(3, 4)
    assert threads == []
    assert await seven.to_list() == [7]
    assert await seven.to_list() == [7]  # the same run
    assert await add_async(1, 1).to_list() == [2]  # another call: another run
    assert len(threads) == 2 and threading.get_ident() not in threads


@pytest.mark.virtual
async def test_to_async_a_coroutine_function_runs_as_a_task_and_errors_are_signalled() -> None:
    async def double(x: int) -> int:
        await asyncio.sleep(1.0)
        return 2 * x

    assert await rx.to_async(double)(21).to_list() == [42]
    with pytest.raises(ValueError, match="boom"):
        await rx.to_async(boom)(1).to_list()
    ts = TestSubscriber[int]()
    rx.to_async(double)(1).subscribe(ts)
    await asyncio.sleep(2.0)
    assert ts.values == [] and not ts.done  # the value waits for demand
    ts.request(1)
    assert ts.values == [2] and ts.completed


def test_to_async_refuses_a_scheduler_with_a_clear_error_and_equals_reactivex() -> None:
    with pytest.raises(ValueError, match="rxpipe has no schedulers"):
        rx.to_async(lambda: 1, scheduler=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        rx.to_async(5)  # type: ignore[arg-type]
    ours = through_rxpipe(lambda _: rx.to_async(lambda x, y: x * y)(6, 7), NONE)
    theirs: list[Any] = []
    done = threading.Event()
    reactivex.to_async(lambda x, y: x * y)(6, 7).subscribe(
        on_next=lambda v: theirs.append(("N", v)), on_completed=lambda: (theirs.append(("C",)), done.set())
    )
    assert done.wait(10.0)
    assert ours == theirs == [("N", 42), ("C",)]


def test_every_one_is_one_item_at_most_under_unbounded_demand() -> None:
    async def main() -> list[list[Any]]:
        async def one() -> int:
            return 1

        out = []
        for source in (rx.start_async(one), rx.to_async(one)(), rx.from_callback(lambda cb: cb(1))()):
            ts = TestSubscriber[Any](initial_request=UNBOUNDED)
            source.subscribe(ts)
            await ts.await_done(5.0)
            out.append(ts.values + (["|"] if ts.completed else []))
        return out

    assert run_virtual(main()) == [[1, "|"]] * 3
