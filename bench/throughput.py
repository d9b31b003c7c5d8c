"""Throughput of one synchronous chain, side by side (DESIGN §10).

    .venv/bin/python bench/throughput.py [--n 1000000] [--rounds 5] [--loop uvloop|asyncio]

1,000,000 integers through map(x*2) → filter(x%3==0) → map(x+1) → sum with:

- rxpipe, fused (one compiled call chain inside the source's loop);
- rxpipe with one ``ops.buffer(256)`` boundary in the middle (after the first map, so every
  item crosses it); skipped with a note if the operator does not exist;
- reactivex (``from_iterable(range(n))`` → ``ops.map``/``ops.filter``/``ops.map``), collected with
  ``list.append``, and the DESIGN §10 baseline: the same chain summed in a plain
  ``subscribe(on_next=...)``;
- an asyncio.Queue per stage (bounded at 256, one task per stage, the sum in the sink task), and
  the DESIGN §10 baseline a competent user would write: a two-stage pipeline (the producer maps
  inline and puts into one ``asyncio.Queue(256)``, the consumer filters, maps and sums);
- aiostream (``stream.range | pipe.map | pipe.filter | pipe.map``, summed by ``async for``);
- a plain generator chain with the same lambdas, summed by ``sum``.

Push/pull terminals collect and then ``sum`` (rxpipe: ``to_list()``; reactivex: ``subscribe``
with ``list.append``, its fastest terminal: ``ops.sum()`` is ~20 % slower); the async rows add as
they receive. Every implementation runs once per round, in a rotating order, for ``--rounds``
rounds; the table shows the median of each, items/s (input items per second), the ratio to
reactivex, and checks every checksum against the closed form (a mismatch exits with status 1).
Then the DESIGN §10 targets, judged against the baselines: fused ≥ 2× reactivex summed in
``on_next``, fused ≥ 0.8× the generator chain, one boundary ≥ 4× the two-stage asyncio pipeline.

Not a test: ``bench/`` is outside pytest's ``testpaths``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from typing import Any, Awaitable, Callable

import reactivex
from reactivex import operators as rx_ops

import rxpipe as rx
from rxpipe import operators as ops

QUEUE_SIZE = 256


# The same three lambdas for every implementation (the idiom of all these libraries' examples).
M1: Callable[[int], int] = lambda x: x * 2  # noqa: E731
F: Callable[[int], bool] = lambda x: x % 3 == 0  # noqa: E731
M2: Callable[[int], int] = lambda x: x + 1  # noqa: E731


def expected_sum(n: int) -> int:
    return sum(2 * x + 1 for x in range(0, n, 3))


# -- implementations: each returns the sum --------------------------------------------------------
async def rxpipe_fused(n: int) -> int:
    return sum(await rx.range(0, n).pipe(ops.map(M1), ops.filter(F), ops.map(M2)).to_list())


async def rxpipe_boundary(n: int) -> int:
    flow = rx.range(0, n).pipe(ops.map(M1), ops.buffer(QUEUE_SIZE), ops.filter(F), ops.map(M2))
    return sum(await flow.to_list())


async def reactivex_chain(n: int) -> int:
    # from_iterable loops inside one scheduled action; reactivex.range schedules every item on
    # the trampoline (about 3× slower), which would measure its source, not the chain.
    items: list[int] = []
    reactivex.from_iterable(range(n)).pipe(rx_ops.map(M1), rx_ops.filter(F), rx_ops.map(M2)).subscribe(items.append)
    return sum(items)


async def reactivex_on_next(n: int) -> int:
    total = 0

    def on_next(x: int) -> None:
        nonlocal total
        total += x

    reactivex.from_iterable(range(n)).pipe(rx_ops.map(M1), rx_ops.filter(F), rx_ops.map(M2)).subscribe(on_next)
    return total


async def asyncio_two_stage(n: int) -> int:
    end = object()
    queue: asyncio.Queue[Any] = asyncio.Queue(QUEUE_SIZE)

    async def producer() -> None:
        for x in range(n):
            await queue.put(M1(x))
        await queue.put(end)

    task = asyncio.create_task(producer())
    total = 0
    while (x := await queue.get()) is not end:
        if F(x):
            total += M2(x)
    await task
    return total


async def asyncio_queues(n: int) -> int:
    end = object()
    q1: asyncio.Queue[Any] = asyncio.Queue(QUEUE_SIZE)
    q2: asyncio.Queue[Any] = asyncio.Queue(QUEUE_SIZE)
    q3: asyncio.Queue[Any] = asyncio.Queue(QUEUE_SIZE)
    q4: asyncio.Queue[Any] = asyncio.Queue(QUEUE_SIZE)

    async def source() -> None:
        for x in range(n):
            await q1.put(x)
        await q1.put(end)

    async def mapper(fn: Callable[[int], int], inbox: asyncio.Queue[Any], outbox: asyncio.Queue[Any]) -> None:
        while (x := await inbox.get()) is not end:
            await outbox.put(fn(x))
        await outbox.put(end)

    async def filterer(pred: Callable[[int], bool], inbox: asyncio.Queue[Any], outbox: asyncio.Queue[Any]) -> None:
        while (x := await inbox.get()) is not end:
            if pred(x):
                await outbox.put(x)
        await outbox.put(end)

    async def sink() -> int:
        total = 0
        while (x := await q4.get()) is not end:
            total += x
        return total

    tasks = [asyncio.create_task(c) for c in (source(), mapper(M1, q1, q2), filterer(F, q2, q3), mapper(M2, q3, q4))]
    total = await sink()
    await asyncio.gather(*tasks)
    return total


async def aiostream_chain(n: int) -> int:
    from aiostream import pipe, stream

    xs = stream.range(n) | pipe.map(M1) | pipe.filter(F) | pipe.map(M2)
    total = 0
    async with xs.stream() as items:
        async for x in items:
            total += x
    return total


async def generator_chain(n: int) -> int:
    g1 = (M1(x) for x in range(n))
    g2 = (x for x in g1 if F(x))
    return sum(M2(x) for x in g2)


# -- harness --------------------------------------------------------------------------------------
Impl = Callable[[int], Awaitable[int]]


async def timed(impl: Impl, n: int) -> tuple[float, int]:
    gc.collect()
    start = time.perf_counter()
    total = await impl(n)
    return time.perf_counter() - start, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="input items (default 1,000,000)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median; default 5)")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop",
                        help="event loop of the async rows (default uvloop, rxpipe's runtime default)")
    args = parser.parse_args(argv)

    rows: list[tuple[str, Impl | None, str]] = [
        ("rxpipe fused", rxpipe_fused, ""),
        ("rxpipe + buffer(256)", rxpipe_boundary if hasattr(ops, "buffer") else None,
         "skipped: ops.buffer does not exist yet"),
        ("reactivex", reactivex_chain, ""),
        ("reactivex, sum in on_next", reactivex_on_next, ""),
        ("asyncio.Queue per stage", asyncio_queues, ""),
        ("asyncio two-stage, one Queue(256)", asyncio_two_stage, ""),
        ("aiostream", aiostream_chain, ""),
        ("generator chain", generator_chain, ""),
    ]
    live = [(name, impl) for name, impl, _ in rows if impl is not None]
    want = expected_sum(args.n)
    times: dict[str, list[float]] = {name: [] for name, _ in live}
    sums: dict[str, int] = {}

    if args.loop == "uvloop":
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    else:
        loop_factory = asyncio.new_event_loop
    print(f"{args.n:,} items, map(x*2) → filter(x%3==0) → map(x+1) → sum; median of {args.rounds} "
          f"interleaved rounds; Python {sys.version.split()[0]}, {args.loop}", flush=True)
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        for r in range(args.rounds):
            order = live[r % len(live):] + live[:r % len(live)]  # rotate who goes first
            for name, impl in order:
                seconds, total = runner.run(timed(impl, args.n))
                times[name].append(seconds)
                sums[name] = total
                if total != want:
                    print(f"CHECKSUM MISMATCH: {name} summed {total}, expected {want}", file=sys.stderr)
                    return 1

    median = {name: statistics.median(ts) for name, ts in times.items()}
    base = median["reactivex"]
    print("\n| implementation | median s | min–max s | items/s | × reactivex | checksum |")
    print("|---|---:|---:|---:|---:|---|")
    for name, maybe_impl, note in rows:
        if maybe_impl is None:
            print(f"| {name} | – | – | – | – | {note} |")
            continue
        seconds = median[name]
        spread = f"{min(times[name]):.3f}–{max(times[name]):.3f}"
        print(f"| {name} | {seconds:.3f} | {spread} | {args.n / seconds:,.0f} | {base / seconds:.2f} | "
              f"ok ({sums[name]}) |")

    print()
    fused = median["reactivex, sum in on_next"] / median["rxpipe fused"]
    print(f"target fused ≥ 2× reactivex (sum in on_next): {fused:.2f}× → {'PASS' if fused >= 2 else 'FAIL'}")
    versus_generators = median["generator chain"] / median["rxpipe fused"]
    print(f"target fused ≥ 0.8× generator chain: {versus_generators:.2f}× → "
          f"{'PASS' if versus_generators >= 0.8 else 'FAIL'}")
    if "rxpipe + buffer(256)" in median:
        boundary = median["asyncio two-stage, one Queue(256)"] / median["rxpipe + buffer(256)"]
        print(f"target buffer(256) boundary ≥ 4× the two-stage asyncio pipeline: {boundary:.2f}× → "
              f"{'PASS' if boundary >= 4 else 'FAIL'}")
    else:
        print("target buffer(256) boundary ≥ 4× the two-stage asyncio pipeline: SKIPPED (no ops.buffer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
