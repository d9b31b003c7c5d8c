"""A small pytest plugin for async tests of rxpipe pipelines; no other plugin needed.

Enable it in ``conftest.py``::

    pytest_plugins = ["rxpipe.testing.pytest_plugin"]

- Every ``async def`` test runs once on asyncio's default loop and once on uvloop
  (parameter ``loop``, ids ``[asyncio]`` / ``[uvloop]``).
- ``@pytest.mark.virtual`` runs it on :class:`~rxpipe.testing.VirtualTimeLoop` instead, where
  sleeps and timers complete instantly; the loop's clock starts at 0.0.
- ``@pytest.mark.loops("asyncio")`` picks the loops explicitly (e.g. a client driving a server
  in another process, where the client's loop is beside the point).
- Leak check: a task still pending or a timer still scheduled (``call_at``/``call_later``, not
  cancelled) when the test returns (after three loop iterations to let cancellations settle)
  fails the test, naming it. Timers are seen on asyncio's loops and the virtual one.
- Fixture ``loop``: the running loop, for tests that want ``loop.time()``.
- Debug checks on (:func:`rxpipe.stage.set_debug`): a low-level stage without ``statistics()``
  is an error at subscribe.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Callable

import pytest

from ..metrics import set_debug
from ._virtual import VirtualTimeLoop


def _uvloop_factory() -> asyncio.AbstractEventLoop:
    import uvloop

    return uvloop.new_event_loop()


LOOP_FACTORIES: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": _uvloop_factory,
    "virtual": VirtualTimeLoop,
}


def pytest_configure(config: pytest.Config) -> None:
    set_debug(True)  # a low-level stage without statistics() fails at subscribe, not silently
    config.addinivalue_line(
        "markers", "virtual: run this async test on rxpipe.testing.VirtualTimeLoop (instant timers)")
    config.addinivalue_line(
        "markers", "loops(*names): run this async test on these loops only (asyncio, uvloop, virtual)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not inspect.iscoroutinefunction(metafunc.function):
        return
    chosen = metafunc.definition.get_closest_marker("loops")
    if metafunc.definition.get_closest_marker("virtual"):
        names = ["virtual"]
    elif chosen is not None:
        names = list(chosen.args)
        unknown = set(names) - set(LOOP_FACTORIES)
        if unknown or not names:
            raise pytest.UsageError(f"@pytest.mark.loops needs names from {sorted(LOOP_FACTORIES)}, got {names}")
    else:
        names = ["asyncio", "uvloop"]
    metafunc.parametrize("_rxpipe_loop_name", names, ids=names, indirect=True)


@pytest.fixture(autouse=True)
def _rxpipe_loop_name(request: pytest.FixtureRequest) -> str | None:
    """Which loop an async test runs on (set by pytest_generate_tests; None for sync tests)."""
    return getattr(request, "param", None)


@pytest.fixture
def loop() -> None:
    """The running event loop of the current async test (injected when the test starts)."""
    return None


def _pending_timers(loop: asyncio.AbstractEventLoop) -> list[asyncio.TimerHandle]:
    """Timers scheduled and not cancelled. asyncio's loops (and the virtual one) keep them in
    ``_scheduled``; uvloop does not expose its timers, so there the check sees none (every test
    also runs on the asyncio or the virtual loop, which catches a leftover timer)."""
    return [h for h in getattr(loop, "_scheduled", ()) if not h.cancelled()]


async def _leak_check(test: Any) -> None:
    current = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for _ in range(3):
        pending = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
        timers = _pending_timers(loop)
        if not pending and not timers:
            return
        await asyncio.sleep(0)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    timers = _pending_timers(loop)  # a cancelled task's own timers (its sleep) are gone now
    for timer in timers:
        timer.cancel()
    left = [f"task {task!r}" for task in pending] + [f"timer {timer!r}" for timer in timers]
    raise AssertionError(f"{test.__name__} left {len(left)} running: {', '.join(left)}")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    test = pyfuncitem.obj
    if not inspect.iscoroutinefunction(test):
        return None
    loop_name = str(pyfuncitem.funcargs["_rxpipe_loop_name"])
    params = inspect.signature(test).parameters
    fixture_names = [name for name in params if name != "loop"]
    lazy_loop = "loop" in params

    async def main() -> None:
        kwargs = {name: pyfuncitem.funcargs[name] for name in fixture_names}
        if lazy_loop:
            kwargs["loop"] = asyncio.get_running_loop()
        await test(**kwargs)
        await _leak_check(test)

    with asyncio.Runner(loop_factory=LOOP_FACTORIES[loop_name]) as runner:
        runner.run(main())
    return True
