"""The plugin's leak check: a task or a timer left behind by a test fails it, naming what was left."""

from __future__ import annotations

import asyncio

from rxpipe import operators as ops
from rxpipe.testing import TestPublisher, TestSubscriber, VirtualTimeLoop
from rxpipe.testing.pytest_plugin import _leak_check


def _check_after(body: object) -> str | None:
    """Run ``body`` (a coroutine function) then the leak check on a virtual loop; the failure text."""
    async def main() -> str | None:
        await body()  # type: ignore[operator]
        try:
            await _leak_check(body)
        except AssertionError as error:
            return str(error)
        return None

    with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
        return runner.run(main())


def test_a_leftover_timer_fails_the_test_and_is_cancelled() -> None:
    handles: list[asyncio.TimerHandle] = []

    async def leaves_a_timer() -> None:
        handles.append(asyncio.get_running_loop().call_later(5.0, print))

    message = _check_after(leaves_a_timer)
    assert message is not None and message.startswith("leaves_a_timer left 1 running: timer <TimerHandle")
    assert handles[0].cancelled()


def test_a_stage_left_with_its_timer_armed_is_caught() -> None:
    async def abandons_a_timeout() -> None:
        pub = TestPublisher[str]()
        ts = TestSubscriber[str]()
        pub.pipe(ops.timeout(5.0)).subscribe(ts)
        ts.request(1)  # the idle timer is armed while the item is awaited; nobody cancels

    message = _check_after(abandons_a_timeout)
    assert message is not None and "timer <TimerHandle" in message and "when=5.0" in message


def test_a_leftover_task_fails_the_test() -> None:
    async def leaves_a_task() -> None:
        asyncio.get_running_loop().create_task(asyncio.sleep(60), name="forgotten")

    message = _check_after(leaves_a_task)
    assert message is not None and message.startswith("leaves_a_task left 1 running: task <Task")
    assert "forgotten" in message


def test_a_test_that_cleans_up_passes() -> None:
    async def cleans_up() -> None:
        pub = TestPublisher[str]()
        ts = TestSubscriber[str]()
        pub.pipe(ops.timeout(5.0)).subscribe(ts)
        ts.request(1)
        ts.cancel()

    assert _check_after(cleans_up) is None
