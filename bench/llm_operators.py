"""Per-item cost of the operators for LLM pipelines, beside their nearest built-in (DESIGN §10:
ratios in one run, since the machine is shared).

    .venv/bin/python bench/llm_operators.py [--n 200000] [--rounds 5] [--loop uvloop|asyncio]

Each row pushes ``n`` integers from ``rx.range`` through one operator into ``to_list()`` (the
async ones with a coroutine that returns at once), under unbounded demand, and reports the
median items/s over ``--rounds`` rounds run in a rotating order, and the ratio to its baseline:

- ``throttle`` (a budget it never exhausts) vs ``rate_limit`` (the same), ``kill_switch`` vs
  ``tap`` (pass-through), ``keep_alive`` vs ``timeout`` (one timer, never firing), ``conflate``
  vs ``map`` under a consumer that keeps up;
- ``map_async_partitioned`` (8 keys) vs ``map_async``, both with 8 calls in flight;
- ``merge_prioritized`` vs ``merge`` (two sources), ``split_when`` + ``concat_map`` vs
  ``buffer_with``-like ``batch`` + ``flat_map`` (groups of 16);
- the hubs: ``merge_hub`` (two producers) vs ``merge``, ``broadcast_hub`` vs ``broadcast(1)``,
  ``partition_hub`` (two consumers, merged back) vs ``group_by`` + ``flat_map``.

Every row checks its item count (a mismatch exits with status 1). Not a test: ``bench/`` is
outside pytest's ``testpaths``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from typing import Any, Awaitable, Callable

import rxpipe as rx
from rxpipe import operators as ops


async def _same(x: int) -> int:
    return x


def _hub_of(n: int) -> rx.Flowable:
    hub = ops.merge_hub(16)
    hub.attach(rx.range(0, n // 2))
    hub.attach(rx.range(n // 2, n))
    hub.drain_and_complete()
    return hub


def _partitioned(n: int) -> rx.Flowable:
    hub = rx.range(0, n).pipe(ops.partition_hub(lambda size, x: x % size, 256, start_after=2))
    return rx.merge(hub, hub)


#: row -> (baseline row or None, n -> the flowable)
ROWS: dict[str, tuple[str | None, Callable[[int], rx.Flowable]]] = {
    "rate_limit": (None, lambda n: rx.range(0, n).pipe(ops.rate_limit(1e12, burst=10**12))),
    "throttle": ("rate_limit", lambda n: rx.range(0, n).pipe(ops.throttle(1e12, 10**12))),
    "tap": (None, lambda n: rx.range(0, n).pipe(ops.tap(lambda x: None))),
    "kill_switch": ("tap", lambda n: rx.range(0, n).pipe(ops.kill_switch())),
    "timeout": (None, lambda n: rx.range(0, n).pipe(ops.timeout(3600.0))),
    "keep_alive": ("timeout", lambda n: rx.range(0, n).pipe(ops.keep_alive(3600.0, lambda: -1))),
    "map": (None, lambda n: rx.range(0, n).pipe(ops.map(lambda x: x))),
    "conflate": ("map", lambda n: rx.range(0, n).pipe(ops.conflate(lambda a, b: b))),
    "map_async": (None, lambda n: rx.range(0, n).pipe(ops.map_async(_same, 8))),
    "map_async_partitioned": ("map_async", lambda n: rx.range(0, n).pipe(
        ops.map_async_partitioned(_same, 8, lambda x: x % 8, ordered=False))),
    "merge": (None, lambda n: rx.range(0, n // 2).pipe(ops.merge(rx.range(n // 2, n)))),
    "merge_prioritized": ("merge", lambda n: rx.range(0, n // 2).pipe(
        ops.merge_prioritized(rx.range(n // 2, n), priorities=(2, 1)))),
    "merge_hub": ("merge", _hub_of),
    "batch+flat_map": (None, lambda n: rx.range(0, n).pipe(ops.batch(16), ops.flat_map(lambda b: b))),
    "split_when+concat_map": ("batch+flat_map", lambda n: rx.range(0, n).pipe(
        ops.split_when(lambda x: x % 16 == 0), ops.concat_map(lambda s: s))),
    "broadcast": (None, lambda n: rx.range(0, n).pipe(ops.broadcast(1))[0]),
    "broadcast_hub": ("broadcast", lambda n: rx.range(0, n).pipe(ops.broadcast_hub(256))),
    "group_by+flat_map": (None, lambda n: rx.range(0, n).pipe(ops.group_by(lambda x: x % 2, 2),
                                                             ops.flat_map(lambda g: g))),
    "partition_hub": ("group_by+flat_map", _partitioned),
}


async def _time(make: Callable[[int], rx.Flowable], n: int) -> tuple[float, int]:
    flowable = make(n)
    gc.collect()
    start = time.perf_counter()
    count = len(await flowable.to_list())
    return time.perf_counter() - start, count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        runner: Callable[[Awaitable[Any]], Any] = uvloop.run
    else:
        runner = asyncio.run
    names = list(ROWS)
    times: dict[str, list[float]] = {name: [] for name in names}
    failed = False
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # a rotating order
            elapsed, count = runner(_time(ROWS[name][1], args.n))
            if count != args.n:
                print(f"{name}: {count} items, expected {args.n}", file=sys.stderr)
                failed = True
            times[name].append(elapsed)
    rate = {name: args.n / statistics.median(times[name]) for name in names}
    print(f"{args.n:,} items, {args.rounds} rounds, {args.loop}; median items/s, ratio to the baseline")
    print(f"{'operator':24} {'items/s':>12}  {'baseline':22} {'ratio':>6}")
    for name in names:
        base = ROWS[name][0]
        if base is None:
            print(f"{name:24} {rate[name]:12,.0f}")
        else:
            print(f"{name:24} {rate[name]:12,.0f}  {base:22} {rate[name] / rate[base]:6.2f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
