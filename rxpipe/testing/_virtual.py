"""A virtual-time event loop: sleeps and timers complete instantly and deterministically."""

from __future__ import annotations

import asyncio
import selectors
from typing import Any, Coroutine, TypeVar

__all__ = ["VirtualTimeLoop", "run_virtual"]

T = TypeVar("T")


class _VirtualSelector(selectors.BaseSelector):
    """Polls the real selector without blocking; when nothing is ready and the loop would sleep
    until its next timer, it moves the virtual clock to that timer instead."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._real = selectors.DefaultSelector()
        self._loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._real.select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            # No timer pending: only real I/O can wake the loop (or the test hangs until its
            # per-test timeout, which is the right outcome for a deadlock).
            return self._real.select(None)
        self._loop.advance_to_next_timer(timeout)
        return []

    def close(self) -> None:
        self._real.close()

    def get_map(self) -> Any:
        return self._real.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose ``time()`` is virtual, starting at 0.0 seconds.

    Whenever no callback is ready, the clock jumps to the earliest scheduled timer, so
    ``await asyncio.sleep(10)`` returns at once with ``loop.time()`` exactly 10.0 later.
    Real I/O still works (it is polled first), but mixing it with virtual time makes timings
    meaningless; keep virtual-time tests in memory.
    """

    def __init__(self) -> None:
        self._virtual_now = 0.0
        super().__init__(selector=_VirtualSelector(self))

    def time(self) -> float:
        return self._virtual_now

    def advance_to_next_timer(self, timeout: float) -> None:
        scheduled = self._scheduled  # type: ignore[attr-defined]  # asyncio.BaseEventLoop internals
        target = scheduled[0].when() if scheduled else self._virtual_now + timeout
        if target > self._virtual_now:
            self._virtual_now = target

    def is_idle(self) -> bool:
        """True when nothing can happen any more without real I/O: no ready callback and no
        live timer. Called from a running task (whose own wake-up is then not pending)."""
        if self._ready:  # type: ignore[attr-defined]  # asyncio.BaseEventLoop internals
            return False
        return all(handle.cancelled() for handle in self._scheduled)  # type: ignore[attr-defined]

    def advance(self, seconds: float) -> None:
        """Move the clock forward by ``seconds`` without running anything (a clock jump)."""
        if seconds < 0:
            raise ValueError("virtual time never goes backwards")
        self._virtual_now += seconds


def run_virtual(coro: Coroutine[Any, Any, T], *, debug: bool = False) -> T:
    """Run ``coro`` to completion on a fresh :class:`VirtualTimeLoop` and return its result.

    Like ``asyncio.run``: the loop is closed afterwards, and tasks left running are cancelled.
    """
    with asyncio.Runner(debug=debug, loop_factory=VirtualTimeLoop) as runner:
        return runner.run(coro)
