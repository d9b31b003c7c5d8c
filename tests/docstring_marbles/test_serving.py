"""The docstring marble diagrams of the serving stages (rxpipe.serving, exported by rxpipe.operators): execute,
fair_queue, balance, prefix_affinity, cache, each played by its runner (the package docstring says how)."""

from __future__ import annotations

import asyncio
import re
from typing import Any, Callable

import pytest

from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.engines import Completion, CompletionRequest, SimulatedEngine
from rxpipe.testing import TestPublisher, TestSubscriber, run_virtual

from .helpers import FOUND, Block, diagram_id, requests_of, tokens_of


def execute(block: Block) -> None:
    async def main() -> None:
        engine = SimulatedEngine(max_num_seqs=2, max_num_batched_tokens=64, step_overhead_s=0.01,
                                 prefill_s_per_token=0.0, decode_s_per_seq=0.0)
        letters = [t for t in tokens_of(block["source"]) if t != "|"]
        pub = TestPublisher[CompletionRequest]()
        out = TestSubscriber[Completion](initial_request=UNBOUNDED)
        pub.pipe(ops.execute(engine)).subscribe(out)
        requests = {letter: CompletionRequest(prompt="abcd", max_tokens=len(letters) - k, id=letter)
                    for k, letter in enumerate(letters)}
        sent = 0
        for _ in range(200):
            while pub.outstanding and sent < len(letters):
                pub.emit(requests[letters[sent]])
                sent += 1
            if sent == len(letters) and not pub.cancelled:
                pub.complete()
            if out.completed:
                break
            await asyncio.sleep(0.005)
        assert pub.requests[:3] == [n for _, n in requests_of(block["demand"])]
        assert [c.request.id.lower() for c in out.values] == [t for t in tokens_of(block["output"]) if t != "|"]
        assert out.completed
        for completion in out.values:
            await completion.result
        await engine.aclose()
    run_virtual(main())


def fair_queue(block: Block) -> None:
    # items are tenant letter + number; an a item costs 3 tokens, a b item 1 (as the diagram says)
    items = re.findall(r"[a-z]\d+", block["source"])
    pub = TestPublisher[str]()
    ts = TestSubscriber[str]()
    pub.pipe(ops.fair_queue(16, tenant=lambda x: x[0], weight={"a": 1, "b": 1},
                            cost=lambda x: 3 if x[0] == "a" else 1)).subscribe(ts)
    pub.emit(*items)
    pub.complete()
    assert ts.values == []
    ts.request(requests_of(block["demand"])[0][1])
    assert ts.values == re.findall(r"[a-z]\d+", block["output"])
    assert ts.completed == block["output"].endswith("|")


def balance(block: Block) -> None:
    pub = TestPublisher[str]()
    got: dict[str, list[str]] = {"x": [], "y": []}
    (_, x_demand), = requests_of(block["x"])
    (_, y_demand), = requests_of(block["y"])
    out = TestSubscriber[str](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(lambda f: f.pipe(ops.limit_rate(x_demand, x_demand), ops.tap(got["x"].append)),
                         lambda f: f.pipe(ops.limit_rate(y_demand, y_demand), ops.tap(got["y"].append)))).subscribe(out)
    assert pub.requests == [n for _, n in requests_of(block["upstream"])]
    items = [t for t in tokens_of(block["source"]) if t != "|"]
    pub.emit(*items).complete()
    for label in ("x", "y"):
        assert got[label] + ["|"] == tokens_of(block[f"{label} gets"])
    assert sorted(out.values) == items and out.completed


def prefix_affinity(block: Block) -> None:
    pub = TestPublisher[str]()
    got: dict[str, list[str]] = {"x": [], "y": []}
    demand = {label: int(n) for label, n in re.findall(r"(\w) demand (\d+)", block["branches"])}

    def branch(label: str) -> Callable[[Any], Any]:
        return lambda f: f.pipe(ops.limit_rate(demand[label], demand[label]), ops.tap(got[label].append))

    pub.pipe(ops.balance(branch("x"), branch("y"), affinity=ops.prefix_affinity())).subscribe(
        TestSubscriber[str](initial_request=UNBOUNDED))
    items = [t for t in tokens_of(block["source"]) if t != "|"]
    pub.emit(*[t[0] * 128 + t for t in items]).complete()  # A1: a 128-character prefix of A's, then "A1"
    for label in ("x", "y"):
        assert [p[128:] for p in got[label]] + ["|"] == tokens_of(block[f"{label} gets"])


def cache(block: Block) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        pub = TestPublisher[CompletionRequest]()
        out = TestSubscriber[CompletionRequest]()
        pub.pipe(ops.cache(8, 60.0)).subscribe(out)
        upstream = [n for _, n in requests_of(block["upstream"])]
        out.request(upstream[0])
        items = [t for t in tokens_of(block["source"]) if t != "|"]
        for letter in items:
            pub.emit(CompletionRequest(prompt=letter, id=letter, reply=loop.create_future(),
                                       sampling={"temperature": 0} if letter == "a" else {}))
        pub.complete()
        assert pub.requests == upstream
        assert [r.id for r in out.values] + ["|"] == tokens_of(block["output"]) and out.completed
    run_virtual(main())


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.execute", 0): execute,
    ("ops.fair_queue", 0): fair_queue,
    ("ops.balance", 0): balance,
    ("ops.prefix_affinity", 0): prefix_affinity,
    ("ops.cache", 0): cache,
}


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=diagram_id)
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
