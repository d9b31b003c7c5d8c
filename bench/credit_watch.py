"""What one credit word costs a router (DESIGN §8b, the credit watch): ``--words`` (100,000) events
of a backend's watch fed to an :class:`~rxpipe.engines.OpenAIEngine`'s watcher as its connection
would hand them over (each in the protocol callback: parse, book, ``seen`` count, capacity check),
on uvloop. Prints microseconds per word, the median of ``--rounds`` (5). The engine has no
backend: the words are the input, as ``bench/throughput.py``'s items are.

Usage: ``.venv/bin/python bench/credit_watch.py [--words N] [--rounds R]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import uvloop

from rxpipe.engines import OpenAIEngine


def words(n: int) -> list[bytes]:
    """``n`` events as a gateway writes them: free slots moving, queue room 8, the count rising."""
    return [b'data: {"free_slots":%d,"queue_room":8,"drain_per_s":250.0,"queue_duration_ms":0,"seq":%d,'
            b'"seen":%d}\n\n' % (i % 8, i + 10, i) for i in range(n)]


async def one_round(events: list[bytes]) -> float:
    loop = asyncio.get_running_loop()
    engine = OpenAIEngine("http://127.0.0.1:9", "m", 16)
    engine.bind_loop(loop)
    engine._loop = loop  # as submit() binds it
    engine._observe_credit({"x-rxpipe-queue-room": "8", "x-rxpipe-free-slots": "8"})  # opens the watcher
    watcher = engine._watcher
    assert watcher is not None
    try:
        started = time.perf_counter()
        for event in events:
            watcher._feed(event)
        elapsed = time.perf_counter() - started
        assert watcher.events == len(events)
        return elapsed / len(events) * 1e6
    finally:
        await engine.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    events = words(args.words)
    per_word = [uvloop.run(one_round(events)) for _ in range(args.rounds)]
    print(f"credit words fed to a router's watcher: {statistics.median(per_word):.2f} us per word "
          f"(median of {args.rounds}; {min(per_word):.2f}..{max(per_word):.2f})")


if __name__ == "__main__":
    main()
