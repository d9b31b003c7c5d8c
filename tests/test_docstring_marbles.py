"""Every marble diagram in a public docstring runs as a test (issue 16: a docstring that lies is a bug).

The diagrams are read from the docstrings of every public callable of ``rxpipe``,
``rxpipe.operators`` and ``rxpipe.testing``, and from the marble kit's manual. A diagram is a block
of indented ``label: diagram`` lines with a ``source:`` (or ``observable:``) line; two or more
spaces followed by anything but ``^`` (a request mark) start a comment. Each diagram has a runner in
:data:`RUNNERS` that plays it: with the marble kit where the diagram is in its language, else by
driving the stage step by step and comparing with the diagram's tokens. A diagram without a runner
(or a runner without a diagram) fails the suite.
"""

from __future__ import annotations

import asyncio
import operator
import re
from typing import Any, Callable

import pytest
from reactivex.notification import OnCompleted, OnError, OnNext
from reactivex.subject import Subject

import rxpipe as rx
from rxpipe import UNBOUNDED, BufferOverflowError, TooManyGroupsError, testing
from rxpipe import operators as ops
from rxpipe.engines import Completion, CompletionRequest, SimulatedEngine
from rxpipe.testing import Marbles, TestPublisher, TestSubscriber, assert_marbles, parse_demand, run_virtual
from rxpipe.testing import _marbles as marble_module
from rxpipe.testing._marble_parse import docstring_marbles

Block = dict[str, str]
diagrams = docstring_marbles  # the blocks of a docstring: the ones the manual draws (rxpipe.testing.draw_marbles)


def _public_docs() -> dict[str, str]:
    docs: dict[str, str] = {"testing (module)": marble_module.__doc__ or ""}  # the kit's manual
    for module, prefix in ((ops, "ops."), (rx, "rx."), (testing, "testing.")):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and obj.__doc__:
                docs[prefix + name] = obj.__doc__
    return docs


def _requests(diagram: str) -> list[tuple[int, int]]:
    return [(frame, n) for frame, n in parse_demand(diagram) if n is not None]


def kit(operator: Callable[[], Any], *, frame_s: float = 0.01, values: dict[str, Any] | None = None,
        expected_error: Any = None) -> Callable[[Block], None]:
    """Run a block with the marble kit: source/demand/output, and ``upstream:`` as the exact
    requests the source sees."""
    def run(block: Block) -> None:
        upstream = block.get("upstream")
        assert_marbles(operator(), source=block["source"], demand=block.get("demand"), expected=block["output"],
                       upstream_requests=_requests(upstream) if upstream is not None else None,
                       frame_s=frame_s, values=values, expected_error=expected_error)
    return run


def shedding(block: Block) -> None:
    for overflow in ("drop_incoming", "drop_oldest", "error"):
        assert_marbles(ops.buffer(2, overflow), source=block["source"], demand=block["demand"],
                       expected=block[overflow], expected_error=BufferOverflowError)


def map_async(block: Block) -> None:
    async def fn(x: str) -> str:
        await asyncio.sleep({"a": 4.0, "b": 1.0, "c": 1.0}[x])
        return x

    for label, ordered in (("ordered", True), ("unordered", False)):
        assert_marbles(ops.map_async(fn, concurrency=2, ordered=ordered), source=block["source"],
                       demand=block["demand"], expected=block[label], frame_s=1.0)


def merge(block: Block) -> None:
    async def main() -> None:
        m = Marbles()
        source, other = m.cold(block["source"]), m.cold(block["other"])
        (await m.run(source.pipe(ops.merge(other)), demand=block["demand"])).expect(block["output"])
    run_virtual(main())


def _tokens(diagram: str) -> list[str]:
    return [t for t in re.split(r"[-\s]+", diagram) if t]


def broadcast(block: Block) -> None:
    pub = TestPublisher[str]()
    a_branch, b_branch = pub.pipe(ops.broadcast(2))
    a, b = TestSubscriber[str](), TestSubscriber[str]()
    a_branch.subscribe(a)
    b_branch.subscribe(b)
    a_requests, (b_request,), upstream = (_requests(block[k]) for k in ("a", "b", "upstream"))
    items = [t for t in _tokens(block["a, b"]) if t != "|"]
    a.request(a_requests[0][1])
    b.request(b_request[1])
    assert pub.requests == [upstream[0][1]]  # the minimum over the branches
    pub.emit(items[0])
    a.request(a_requests[1][1])
    assert pub.requests == [n for _, n in upstream]
    pub.emit(*items[1:]).complete()
    assert a.values == b.values == items and a.completed and b.completed
    assert _tokens(block["source"]) == [*items, "|"]


def group_by(block: Block) -> None:
    source = _tokens(block["source"])
    closed = source[-1] == "|"
    items = source[:-1] if closed else source
    pub = TestPublisher[str]()
    main = TestSubscriber[Any](initial_request=UNBOUNDED)
    lanes: dict[str, TestSubscriber[str]] = {}

    def attach(group: Any) -> None:
        lanes[group.key.upper()] = ts = TestSubscriber[str](initial_request=UNBOUNDED)
        group.subscribe(ts)

    max_groups = 3 if closed else 2  # as the two diagrams say
    pub.pipe(ops.group_by(lambda s: s[0], max_groups=max_groups), ops.tap(attach)).subscribe(main)
    pub.emit(*items)
    if closed:
        pub.complete()
    assert "".join(lanes) == "".join(t for t in _tokens(block["main"]) if t not in "|#")
    for key, ts in lanes.items():
        if key in block:
            assert ts.values + (["|"] if ts.completed else ["#"] if ts.error else []) == _tokens(block[key])
    if closed:
        assert main.completed
    else:
        assert isinstance(main.error, TooManyGroupsError) and pub.cancelled


def execute(block: Block) -> None:
    async def main() -> None:
        engine = SimulatedEngine(max_num_seqs=2, max_num_batched_tokens=64, step_overhead_s=0.01,
                                 prefill_s_per_token=0.0, decode_s_per_seq=0.0)
        letters = [t for t in _tokens(block["source"]) if t != "|"]
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
        assert pub.requests[:3] == [n for _, n in _requests(block["demand"])]
        assert [c.request.id.lower() for c in out.values] == [t for t in _tokens(block["output"]) if t != "|"]
        assert out.completed
        for completion in out.values:
            await completion.result
        await engine.aclose()
    run_virtual(main())


def from_observable(block: Block) -> None:
    pushed = _tokens(block["observable"])[0].strip("()")
    for overflow in ("drop_incoming", "drop_oldest", "error"):
        subject: Subject[str] = Subject()
        ts = TestSubscriber[str]()
        rx.from_observable(subject, 2, overflow).subscribe(ts)
        for item in pushed:
            if item == "|":
                subject.on_completed()
            else:
                subject.on_next(item)
        assert ts.values == []
        ts.request(_requests(block["demand"])[0][1])
        end = "|" if ts.completed else "#" if isinstance(ts.error, BufferOverflowError) else "?"
        assert "-(" + "".join(ts.values) + end + ")" == block[overflow]


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
    ts.request(_requests(block["demand"])[0][1])
    assert ts.values == re.findall(r"[a-z]\d+", block["output"])
    assert ts.completed == block["output"].endswith("|")


def balance(block: Block) -> None:
    pub = TestPublisher[str]()
    got: dict[str, list[str]] = {"x": [], "y": []}
    (_, x_demand), = _requests(block["x"])
    (_, y_demand), = _requests(block["y"])
    out = TestSubscriber[str](initial_request=UNBOUNDED)
    pub.pipe(ops.balance(lambda f: f.pipe(ops.limit_rate(x_demand, x_demand), ops.tap(got["x"].append)),
                         lambda f: f.pipe(ops.limit_rate(y_demand, y_demand), ops.tap(got["y"].append)))).subscribe(out)
    assert pub.requests == [n for _, n in _requests(block["upstream"])]
    items = [t for t in _tokens(block["source"]) if t != "|"]
    pub.emit(*items).complete()
    for label in ("x", "y"):
        assert got[label] + ["|"] == _tokens(block[f"{label} gets"])
    assert sorted(out.values) == items and out.completed


def prefix_affinity(block: Block) -> None:
    pub = TestPublisher[str]()
    got: dict[str, list[str]] = {"x": [], "y": []}
    demand = {label: int(n) for label, n in re.findall(r"(\w) demand (\d+)", block["branches"])}

    def branch(label: str) -> Callable[[Any], Any]:
        return lambda f: f.pipe(ops.limit_rate(demand[label], demand[label]), ops.tap(got[label].append))

    pub.pipe(ops.balance(branch("x"), branch("y"), affinity=ops.prefix_affinity())).subscribe(
        TestSubscriber[str](initial_request=UNBOUNDED))
    items = [t for t in _tokens(block["source"]) if t != "|"]
    pub.emit(*[t[0] * 128 + t for t in items]).complete()  # A1: a 128-character prefix of A's, then "A1"
    for label in ("x", "y"):
        assert [p[128:] for p in got[label]] + ["|"] == _tokens(block[f"{label} gets"])


def cache(block: Block) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        pub = TestPublisher[CompletionRequest]()
        out = TestSubscriber[CompletionRequest]()
        pub.pipe(ops.cache(8, 60.0)).subscribe(out)
        upstream = [n for _, n in _requests(block["upstream"])]
        out.request(upstream[0])
        items = [t for t in _tokens(block["source"]) if t != "|"]
        for letter in items:
            pub.emit(CompletionRequest(prompt=letter, id=letter, reply=loop.create_future(),
                                       sampling={"temperature": 0} if letter == "a" else {}))
        pub.complete()
        assert pub.requests == upstream
        assert [r.id for r in out.values] + ["|"] == _tokens(block["output"]) and out.completed
    run_virtual(main())


# -- second round: filters, reducers, take_until, start_with, catch, retry ---------------------------
def take_until(block: Block) -> None:
    async def main() -> None:
        m = Marbles()
        source, other = m.cold(block["source"]), m.cold(block["other"])
        result = await m.run(source.pipe(ops.take_until(other)), demand=block["demand"])
        result.expect(block["output"])
        assert source.cancelled_at == other.cancelled_at == len(block["output"]) - 1
        assert other.request_log == [(0, 1)]
    run_virtual(main())


def catch(block: Block) -> None:
    async def main() -> None:
        m = Marbles()
        source, handler = m.cold(block["source"]), m.cold(block["handler"])
        result = await m.run(source.pipe(ops.catch(handler)), demand=block["demand"])
        result.expect(block["output"])
        (failed_at, owed), = handler.request_log  # asked once, when the source failed
        assert failed_at == len(block["source"]) - 1 and owed == 2
    run_virtual(main())

# -- second round: flat_map, concat_map, switch_map, zip, combine_latest, with_latest_from, concat,
#    and the static rx.zip, rx.merge, rx.concat, rx.combine_latest --
def streams(build: Callable[..., Any], *, values: dict[str, Any] | None = None,
            other_requests: str | None = None, subscribed_later: bool = False) -> Callable[[Block], None]:
    """Play a block over several cold marble sources: ``source`` (the first), the other sources
    (``other``, ``third``: drawn from frame 0, or from the frame they are subscribed in with
    ``subscribed_later``, as ``concat``'s), and the inner streams of ``flat_map`` & co (the lines
    labelled by one letter: the stream ``fn`` returns for that item, drawn from the frame it is
    subscribed in). ``build(source, fn, *others)`` makes the flowable under test. ``upstream:``
    is the source's exact requests; ``other_requests`` (a demand diagram) the other's."""
    def run(block: Block) -> None:
        async def main() -> None:
            m = Marbles(values=values)
            source = m.cold(block["source"])
            others = [m.cold(block[label].strip() if subscribed_later else block[label])
                      for label in ("other", "third") if label in block]
            inner = {label: m.cold(block[label].strip()) for label in block if len(label) == 1}

            def fn(item: Any) -> Any:
                return inner[item]

            result = await m.run(build(source, fn, *others), demand=block.get("demand", "^*"))
            result.expect(block["output"], upstream_requests=_requests(block["upstream"]) if "upstream" in block
                          else None)
            if other_requests is not None:
                assert list(others[0].request_log) == _requests(other_requests)
        run_virtual(main())
    return run


_PAIRS = {"w": ("a", 1), "x": ("a", 2), "y": ("b", 2), "z": ("c", 2)}


# -- second round (issue 22): sources timer, never, from_future ----------------------------------------
def source_runner(make: Callable[[], Any]) -> Callable[[Block], None]:
    """Play a source's diagram: its ``source:`` line is what the subscriber gets under ``demand:``."""
    def run(block: Block) -> None:
        async def main() -> None:
            (await Marbles().run(make(), demand=block["demand"])).expect(block["source"])
        run_virtual(main())
    return run


def from_future(block: Block) -> None:
    (frame, value), = [(i, c) for i, c in enumerate(block["future"]) if c != "-"]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        loop.call_at(loop.time() + frame * 0.01, future.set_result, value)
        (await Marbles().run(rx.from_future(future), demand=block["demand"])).expect(block["source"])
        assert future.done()
    run_virtual(main())


# -- third round (issue 34) -------------------------------------------------------------------------
class _Recorder:
    """An observer for ``do(observer)`` writing what it sees into ``calls``."""

    def __init__(self, calls: list[Any]) -> None:
        self.calls = calls

    def on_next(self, item: Any) -> None:
        self.calls.append(item)

    def on_completed(self) -> None:
        self.calls.append("|")


def tapped(make: Callable[[list[Any]], Any]) -> Callable[[Block], None]:
    """A tap's diagram: the items pass unchanged and the callbacks saw each signal in order."""
    def run(block: Block) -> None:
        calls: list[Any] = []
        assert_marbles(make(calls), source=block["source"], demand=block.get("demand"), expected=block["output"])
        assert calls == [t for t in _tokens(block["source"])]
    return run


def finally_action(block: Block) -> None:
    seen: list[str] = []

    def action() -> None:
        seen.append("action")

    op = rx.pipe(ops.finally_action(action), ops.tap(on_completed=lambda: seen.append("|")))
    assert_marbles(op, source=block["source"], demand=block.get("demand"), expected=block["output"])
    assert seen == ["|", "action"]


def to_future(block: Block) -> None:
    async def main() -> None:  # the future's outcome as a stream, drawn on the same clock
        m = Marbles()
        source = m.cold(block["source"])
        outcome = rx.defer(lambda: rx.from_future(source.pipe(ops.to_future())))
        (await m.run(outcome, demand=block["demand"])).expect(block["output"])
    run_virtual(main())


def materialize(block: Block) -> None:
    error = RuntimeError("error")
    assert_marbles(ops.materialize(), source=block["source"], demand=block["demand"], expected=block["output"],
                   error=error, values={"x": OnNext("a"), "y": OnNext("b"), "z": OnError(error)})


def _rounded(item: Any) -> Any:
    """A Timestamp / TimeInterval with its seconds rounded (the virtual clock's float sums)."""
    return type(item)(item[0], round(item[1], 6))


def _true_times(k: int) -> Callable[[Any], bool]:
    calls = [0]

    def condition(source: Any) -> bool:
        calls[0] += 1
        return calls[0] <= k
    return condition


def two_sources(build: Callable[[Any, Any], Any], *, other_cancelled_at: int | None = None,
                values: dict[str, Any] | None = None, subscribed_later: bool = False) -> Callable[[Block], None]:
    """A block with a ``source`` and an ``other`` (cold, from frame 0; or drawn from the frame it
    is subscribed in with ``subscribed_later``)."""
    def run(block: Block) -> None:
        async def main() -> None:
            m = Marbles(values=values)
            source = m.cold(block["source"])
            other = m.cold(block["other"].strip() if subscribed_later else block["other"])
            (await m.run(build(source, other), demand=block.get("demand", "^*"))).expect(block["output"])
            if other_cancelled_at is not None:
                assert other.cancelled_at == other_cancelled_at
        run_virtual(main())
    return run


def windows(build: Callable[..., Any], *, pairs: bool = False) -> Callable[[Block], None]:
    """A block whose ``main`` row names the windows (``A``, ``B`` ...) as they come, each with its
    own row: the main row is played exactly (cold ``source`` and ``other``, virtual time); each
    window is subscribed as it comes, without bound, and its items and terminal signal are
    its row's (as ``group_by``'s lanes). ``pairs``: the stream emits ``(item, window)``."""
    def run(block: Block) -> None:
        async def main() -> None:
            m = Marbles()
            labels = iter(c for c in block["main"] if c not in "-()|# ")  # one-character marbles
            lanes: dict[str, TestSubscriber[Any]] = {}

            def attach(window: Any) -> str:
                label = next(labels)
                lanes[label] = ts = TestSubscriber[Any](initial_request=UNBOUNDED)
                (window[1] if pairs else window).subscribe(ts)
                return label

            sources = [m.cold(block["source"])] + ([m.cold(block["other"])] if "other" in block else [])
            (await m.run(build(*sources).pipe(ops.map(attach)), demand="^*")).expect(block["main"])
            for label, ts in lanes.items():
                row = [c for c in block[label] if c not in "-() "]
                assert [str(v) for v in ts.values] + (["|"] if ts.completed else []) == row, label
        run_virtual(main())
    return run


def partition(predicate: Callable[..., Any], *, indexed: bool = False) -> Callable[[Block], None]:
    """Both halves of ``partition`` played exactly on one cold source (one-character marbles):
    each half's items at their frames, and the completion of both at its frame."""
    def run(block: Block) -> None:
        async def main() -> None:
            m = Marbles(values=None if indexed else {str(i): i for i in range(10)})
            source = m.cold(block["source"])
            holds, fails = source.pipe(ops.partition_indexed(predicate) if indexed else ops.partition(predicate))
            both = rx.merge(holds.pipe(ops.map(lambda x: ("holds", x))), fails.pipe(ops.map(lambda x: ("fails", x))))
            timeline = (await m.run(both, demand="^*")).timeline
            for half in ("holds", "fails"):
                row = block[half]
                got = [(e.frame, str(e.value[1])) for e in timeline if e.kind == "next" and e.value[0] == half]
                assert got == [(i, c) for i, c in enumerate(row) if c not in "-|"], half
                assert [e.frame for e in timeline if e.kind == "complete"] == [row.index("|")]
        run_virtual(main())
    return run


RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.map", 0): kit(lambda: ops.map(lambda x: x * 2)),
    ("ops.filter", 0): kit(lambda: ops.filter(lambda x: x % 2 == 0)),
    ("ops.scan", 0): kit(lambda: ops.scan(lambda acc, x: acc + x, 0)),
    ("ops.take", 0): kit(lambda: ops.take(2)),
    ("ops.skip", 0): kit(lambda: ops.skip(2)),
    ("ops.tap", 0): kit(lambda: ops.tap(lambda x: None)),
    ("ops.buffer", 0): kit(lambda: ops.buffer(4)),
    ("ops.buffer", 1): shedding,
    ("ops.limit_rate", 0): kit(lambda: ops.limit_rate(8, 2)),
    ("ops.batch", 0): kit(lambda: ops.batch(3, max_delay_s=0.04),
                          values={"x": ["a", "b", "c"], "y": ["d"], "z": ["e"]}),
    ("ops.batch", 1): kit(lambda: ops.batch(8, weight=len, max_weight=10),
                          values={"a": "aaaa", "b": "bbbb", "c": "cc", "d": "d" * 12, "e": "e",
                                  "x": ["aaaa", "bbbb", "cc"], "y": ["d" * 12], "z": ["e"]}),
    ("ops.rate_limit", 0): kit(lambda: ops.rate_limit(20, burst=5)),
    ("ops.map_async", 0): map_async,
    ("ops.timeout", 0): kit(lambda: ops.timeout(5), frame_s=1.0, expected_error=TimeoutError),
    ("ops.timeout", 1): kit(lambda: ops.timeout(5), frame_s=1.0),
    ("ops.timeout", 2): kit(lambda: ops.timeout(5, mode="item"), frame_s=1.0, expected_error=TimeoutError),
    ("ops.merge", 0): merge,
    ("ops.broadcast", 0): broadcast,
    ("ops.group_by", 0): group_by,
    ("ops.group_by", 1): group_by,
    ("ops.execute", 0): execute,
    ("ops.fair_queue", 0): fair_queue,
    ("ops.balance", 0): balance,
    ("ops.prefix_affinity", 0): prefix_affinity,
    ("ops.cache", 0): cache,
    ("rx.from_observable", 0): from_observable,
    ("testing.assert_marbles", 0): kit(lambda: ops.map(lambda x: x * 2)),
    ("testing.draw_marbles", 0): kit(lambda: ops.map(lambda x: x * 2)),
    ("testing (module)", 0): kit(lambda: ops.filter(lambda x: x % 2 == 0)),
    # -- second round: filters, reducers, take_until, start_with, catch, retry
    ("ops.pairwise", 0): kit(lambda: ops.pairwise(), values={"x": ("a", "b"), "y": ("b", "c"), "z": ("c", "d")}),
    ("ops.distinct", 0): kit(lambda: ops.distinct()),
    ("ops.distinct", 1): kit(lambda: ops.distinct(max_keys=2)),
    ("ops.distinct_until_changed", 0): kit(lambda: ops.distinct_until_changed()),
    ("ops.take_while", 0): kit(lambda: ops.take_while(lambda x: x < 3)),
    ("ops.skip_while", 0): kit(lambda: ops.skip_while(lambda x: x < 3)),
    ("ops.take_until", 0): take_until,
    ("ops.first", 0): kit(lambda: ops.first(lambda x: x % 2 == 0)),
    ("ops.first", 1): kit(lambda: ops.first(), expected_error=rx.SequenceContainsNoElementsError),
    ("ops.last", 0): kit(lambda: ops.last(prefetch=4)),
    ("ops.reduce", 0): kit(lambda: ops.reduce(lambda acc, x: acc + x)),
    ("ops.count", 0): kit(lambda: ops.count(prefetch=4)),
    ("ops.to_list", 0): kit(lambda: ops.to_list(prefetch=4), values={"x": ["a", "b", "c"]}),
    ("ops.start_with", 0): kit(lambda: ops.start_with("a", "b")),
    ("ops.catch", 0): catch,
    ("ops.retry", 0): kit(lambda: ops.retry(3), expected_error=Exception),
    # -- second round: flat_map & co, zip & co, and the static forms --
    ("ops.flat_map", 0): streams(lambda s, fn: s.pipe(ops.flat_map(fn, max_concurrency=2))),
    ("ops.concat_map", 0): streams(lambda s, fn: s.pipe(ops.concat_map(fn))),
    ("ops.switch_map", 0): streams(lambda s, fn: s.pipe(ops.switch_map(fn))),
    ("ops.zip", 0): streams(lambda s, fn, other: s.pipe(ops.zip(other)), other_requests="^32",
                            values={"x": ("a", 1), "y": ("b", 2), "z": ("c", 3)}),
    ("ops.combine_latest", 0): streams(lambda s, fn, other: s.pipe(ops.combine_latest(other)),
                                       other_requests="^32", values={**_PAIRS, "x": ("a", 2), "w": ("a", 1)}),
    ("ops.with_latest_from", 0): streams(lambda s, fn, other: s.pipe(ops.with_latest_from(other)),
                                         other_requests="^*", values={"x": ("b", 1), "y": ("c", 2)}),
    ("ops.concat", 0): streams(lambda s, fn, other: s.pipe(ops.concat(other)), other_requests="    ^1  ^9",
                               subscribed_later=True),
    ("rx.zip", 0): streams(lambda s, fn, other: rx.zip(s, other), values={"x": ("a", 1), "y": ("b", 2)}),
    ("rx.merge", 0): streams(lambda s, fn, other: rx.merge(s, other)),
    ("rx.concat", 0): streams(lambda s, fn, other: rx.concat(s, other), subscribed_later=True),
    ("rx.combine_latest", 0): streams(lambda s, fn, other: rx.combine_latest(s, other),
                                      values={"w": ("a", 1), "x": ("b", 1), "y": ("b", 2)}),
    # -- second round (issue 22): time operators and sources --
    ("ops.debounce", 0): kit(lambda: ops.debounce(0.03)),
    ("ops.sample", 0): kit(lambda: ops.sample(0.04)),
    ("ops.throttle_first", 0): kit(lambda: ops.throttle_first(0.04)),
    ("ops.delay", 0): kit(lambda: ops.delay(0.03)),
    ("rx.timer", 0): source_runner(lambda: rx.timer(0.03)),
    ("rx.timer", 1): source_runner(lambda: rx.timer(0.03, 0.02)),
    ("rx.never", 0): source_runner(rx.never),
    ("rx.from_future", 0): from_future,
    # -- third round (issue 34): one-to-one and filters
    ("ops.map_indexed", 0): kit(lambda: ops.map_indexed(lambda x, i: x * (i + 1)),
                                values={"x": "a", "y": "bb", "z": "ccc"}),
    ("ops.starmap", 0): kit(lambda: ops.starmap(operator.add), values={"x": (1, 2), "y": (3, 4)}),
    ("ops.starmap_indexed", 0): kit(lambda: ops.starmap_indexed(lambda a, b, i: a + b + i),
                                    values={"x": (1, 2, 0), "y": (3, 4, 1)}),
    ("ops.pluck", 0): kit(lambda: ops.pluck("n"), values={"x": {"n": 1}, "y": {"n": 2}}),
    ("ops.pluck_attr", 0): kit(lambda: ops.pluck_attr("real"), values={"x": 1 + 0j, "y": 2 + 0j, "1": 1.0, "2": 2.0}),
    ("ops.do_action", 0): tapped(lambda calls: ops.do_action(calls.append, on_completed=lambda: calls.append("|"))),
    ("ops.do", 0): tapped(lambda calls: ops.do(_Recorder(calls))),
    ("ops.finally_action", 0): finally_action,
    ("ops.materialize", 0): materialize,
    ("ops.dematerialize", 0): kit(lambda: ops.dematerialize(),
                                  values={"x": OnNext("a"), "y": OnNext("b"), "z": OnCompleted()}),
    ("ops.filter_indexed", 0): kit(lambda: ops.filter_indexed(lambda x, i: i % 2 == 0)),
    ("ops.take_while_indexed", 0): kit(lambda: ops.take_while_indexed(lambda x, i: i < 2)),
    ("ops.skip_while_indexed", 0): kit(lambda: ops.skip_while_indexed(lambda x, i: i < 2)),
    ("ops.skip_until", 0): two_sources(lambda source, other: source.pipe(ops.skip_until(other)),
                                       other_cancelled_at=4),
    ("ops.element_at", 0): kit(lambda: ops.element_at(2)),
    ("ops.element_at", 1): kit(lambda: ops.element_at(2), expected_error=rx.ArgumentOutOfRangeError),
    ("ops.element_at_or_default", 0): kit(lambda: ops.element_at_or_default(2, "z")),
    ("ops.first_or_default", 0): kit(lambda: ops.first_or_default(lambda x: x % 2 == 0, 0)),
    ("ops.skip_last", 0): kit(lambda: ops.skip_last(2)),
    ("ops.default_if_empty", 0): kit(lambda: ops.default_if_empty("z")),
    ("ops.slice", 0): kit(lambda: ops.slice(1, 4, 2)),
    # -- third round (issue 34): aggregates
    ("ops.all", 0): kit(lambda: ops.all(lambda x: x % 2 == 0), values={"F": False}),
    ("ops.some", 0): kit(lambda: ops.some(lambda x: x % 2 == 0), values={"T": True}),
    ("ops.contains", 0): kit(lambda: ops.contains("b"), values={"T": True}),
    ("ops.is_empty", 0): kit(lambda: ops.is_empty(), values={"F": False}),
    ("ops.sequence_equal", 0): two_sources(lambda source, other: source.pipe(ops.sequence_equal(other)),
                                           other_cancelled_at=3, values={"F": False}),
    ("ops.sum", 0): kit(lambda: ops.sum(prefetch=4)),
    ("ops.average", 0): kit(lambda: ops.average(), values={"3": 3.0}),
    ("ops.max", 0): kit(lambda: ops.max()),
    ("ops.min", 0): kit(lambda: ops.min()),
    ("ops.max_by", 0): kit(lambda: ops.max_by(len), values={"a": "a", "b": "bb", "c": "c", "d": "dd",
                                                             "x": ["bb", "dd"]}),
    ("ops.min_by", 0): kit(lambda: ops.min_by(len), values={"a": "aa", "b": "b", "c": "cc", "d": "d",
                                                             "x": ["b", "d"]}),
    ("ops.to_dict", 0): kit(lambda: ops.to_dict(lambda s: s[0]), values={"a": "a1", "b": "b1", "c": "a2",
                                                                         "x": {"a": "a2", "b": "b1"}}),
    ("ops.to_set", 0): kit(lambda: ops.to_set(), values={"x": {"a", "b"}}),
    ("ops.to_future", 0): to_future,
    ("ops.single", 0): kit(lambda: ops.single(), expected_error=rx.SequenceContainsMoreThanOneElementError),
    ("ops.single_or_default", 0): kit(lambda: ops.single_or_default(None, "z")),
    ("ops.find", 0): kit(lambda: ops.find(lambda x, i, src: x == "b")),
    ("ops.find_index", 0): kit(lambda: ops.find_index(lambda x, i, src: x == "b")),
    ("ops.take_last", 0): kit(lambda: ops.take_last(2)),
    ("ops.take_last_buffer", 0): kit(lambda: ops.take_last_buffer(2), values={"x": ["c", "d"]}),
    ("ops.last_or_default", 0): kit(lambda: ops.last_or_default("z")),
    ("ops.ignore_elements", 0): kit(lambda: ops.ignore_elements(prefetch=4)),
    # -- third round (issue 34): higher order
    ("ops.merge_all", 0): streams(lambda s, fn: s.pipe(ops.map(fn), ops.merge_all())),
    ("ops.concat_all", 0): streams(lambda s, fn: s.pipe(ops.map(fn), ops.concat_all())),
    ("ops.switch_latest", 0): streams(lambda s, fn: s.pipe(ops.map(fn), ops.switch_latest())),
    ("ops.exclusive", 0): streams(lambda s, fn: s.pipe(ops.map(fn), ops.exclusive())),
    ("ops.flat_map_indexed", 0): streams(lambda s, fn: s.pipe(ops.flat_map_indexed(lambda x, i: fn(x)))),
    ("ops.flat_map_latest", 0): streams(lambda s, fn: s.pipe(ops.flat_map_latest(fn))),
    ("ops.switch_map_indexed", 0): streams(lambda s, fn: s.pipe(ops.switch_map_indexed(lambda x, i: fn(x)))),
    ("ops.expand", 0): streams(lambda s, fn: s.pipe(ops.expand(fn))),
    ("ops.amb", 0): two_sources(lambda source, other: source.pipe(ops.amb(other))),
    ("ops.zip_latest", 0): two_sources(lambda source, other: source.pipe(ops.zip_latest(other)),
                                       values={"x": ("a", 1), "y": ("c", 2)}),
    ("ops.zip_with_iterable", 0): kit(lambda: ops.zip_with_iterable([1, 2]), values={"x": ("a", 1), "y": ("b", 2)}),
    ("ops.zip_with_list", 0): kit(lambda: ops.zip_with_list([1, 2]), values={"x": ("a", 1), "y": ("b", 2)}),
    ("ops.join", 0): two_sources(lambda source, other: source.pipe(ops.join(
        other, lambda x: rx.timer(0.05 if x == "a" else 0.01), lambda x: rx.timer(0.01))),
        values={"x": ("a", 1), "y": ("a", 2)}),
    ("ops.on_error_resume_next", 0): two_sources(lambda source, other: source.pipe(ops.on_error_resume_next(other)),
                                                 subscribed_later=True),
    ("ops.repeat", 0): kit(lambda: ops.repeat(3)),
    ("ops.do_while", 0): kit(lambda: ops.do_while(_true_times(1))),
    ("ops.while_do", 0): kit(lambda: ops.while_do(_true_times(2))),
    # -- third round (issue 34): time
    ("ops.timestamp", 0): kit(lambda: rx.pipe(ops.timestamp(), ops.map(_rounded)),
                              values={"x": ops.Timestamp("a", 0.01), "y": ops.Timestamp("b", 0.04)}),
    ("ops.time_interval", 0): kit(lambda: rx.pipe(ops.time_interval(), ops.map(_rounded)),
                                  values={"x": ops.TimeInterval("a", 0.01), "y": ops.TimeInterval("b", 0.03)}),
    ("ops.take_with_time", 0): kit(lambda: ops.take_with_time(0.05)),
    ("ops.take_until_with_time", 0): kit(lambda: ops.take_until_with_time(0.05)),
    ("ops.skip_with_time", 0): kit(lambda: ops.skip_with_time(0.06)),
    ("ops.skip_until_with_time", 0): kit(lambda: ops.skip_until_with_time(0.05)),
    ("ops.take_last_with_time", 0): kit(lambda: ops.take_last_with_time(0.05)),
    ("ops.skip_last_with_time", 0): kit(lambda: ops.skip_last_with_time(0.04)),
    ("ops.delay_subscription", 0): kit(lambda: ops.delay_subscription(0.03)),
    ("ops.delay_with_mapper", 0): kit(lambda: ops.delay_with_mapper(lambda x: rx.timer(0.04 if x == "a" else 0.01))),
    ("ops.throttle_with_timeout", 0): kit(lambda: ops.throttle_with_timeout(0.03)),
    ("ops.throttle_with_mapper", 0): kit(lambda: ops.throttle_with_mapper(lambda x: rx.timer(0.04))),
    ("ops.timeout_with_mapper", 0): two_sources(lambda source, other: source.pipe(ops.timeout_with_mapper(
        rx.timer(0.04), lambda x: rx.timer(0.04), other)), subscribed_later=True),
    ("ops.timeout", 3): two_sources(lambda source, other: source.pipe(ops.timeout(0.03, other)),
                                    subscribed_later=True),
    # -- buffers and windows (issue 34)
    ("ops.buffer", 2): two_sources(lambda source, other: source.pipe(ops.buffer(other)),
                                   values={"p": ["a", "b"], "q": ["c"], "r": []}),
    ("ops.buffer_with_count", 0): kit(lambda: ops.buffer_with_count(2), values={"x": ["a", "b"], "y": ["c", "d"]}),
    ("ops.buffer_with_time", 0): kit(lambda: ops.buffer_with_time(0.04),
                                     values={"x": ["a", "b"], "y": ["c"], "z": [], "w": []}),
    ("ops.buffer_with_time_or_count", 0): kit(lambda: ops.buffer_with_time_or_count(0.05, 3),
                                              values={"x": ["a", "b", "c"], "y": [], "z": ["d"]}),
    ("ops.buffer_when", 0): kit(lambda: ops.buffer_when(lambda: rx.timer(0.04)),
                                values={"x": ["a", "b"], "y": ["c"], "z": []}),
    ("ops.buffer_toggle", 0): two_sources(lambda source, other: source.pipe(
        ops.buffer_toggle(other, lambda o: rx.timer(0.04))), values={"x": ["b", "c"], "y": ["e"]}),
    ("ops.partition", 0): partition(lambda x: x % 2 == 0),
    ("ops.partition_indexed", 0): partition(lambda x, i: i % 2 == 0, indexed=True),
    ("ops.window", 0): windows(lambda source, other: source.pipe(ops.window(other))),
    ("ops.window_with_count", 0): windows(lambda source: source.pipe(ops.window_with_count(2))),
    ("ops.window_with_time", 0): windows(lambda source: source.pipe(ops.window_with_time(0.04))),
    ("ops.window_with_time_or_count", 0): windows(lambda source: source.pipe(ops.window_with_time_or_count(0.05, 3))),
    ("ops.window_when", 0): windows(lambda source: source.pipe(ops.window_when(lambda: rx.timer(0.04)))),
    ("ops.window_toggle", 0): windows(lambda source, other: source.pipe(
        ops.window_toggle(other, lambda o: rx.timer(0.04)))),
    ("ops.group_by_until", 0): windows(lambda source: source.pipe(
        ops.group_by_until(str.lower, None, lambda g: rx.timer(0.04)))),
    ("ops.group_join", 0): windows(lambda source, other: source.pipe(ops.group_join(
        other, lambda x: rx.timer(0.05 if x == "a" else 0.01), lambda r: rx.timer(0.01))), pairs=True),
    ("ops.fork_join", 0): two_sources(lambda source, other: source.pipe(ops.fork_join(other)),
                                      values={"z": (2, "y")}),
    # -- the rest of reactivex's creation functions (the kit, third round)
    ("rx.catch", 0): streams(lambda s, fn, other: rx.catch(s, other), other_requests="    ^1", subscribed_later=True),
    ("rx.catch_with_iterable", 0): streams(lambda s, fn, other: rx.catch_with_iterable([s, other]),
                                           other_requests="  ^1    ^9", subscribed_later=True),
    ("rx.concat_with_iterable", 0): streams(lambda s, fn, other: rx.concat_with_iterable(iter([s, other])),
                                            other_requests="    ^1", subscribed_later=True),
    ("rx.with_latest_from", 0): streams(lambda s, fn, other: rx.with_latest_from(s, other), other_requests="^*",
                                        values={"x": ("b", 1), "y": ("c", 2)}),
    ("rx.zip_latest", 0): two_sources(lambda source, other: rx.zip_latest(source, other),
                                      values={"x": ("a", 1), "y": ("c", 2)}),
    ("rx.generate_with_relative_time", 0): source_runner(
        lambda: rx.generate_with_relative_time(0, lambda x: x < 4, lambda x: x + 1, lambda x: 0.02)),
}


# -- operators for LLM pipelines beyond RxPY (issue 41) -----------------------------------------------
class _Timeline(TestSubscriber[Any]):
    """A TestSubscriber recording each signal as a marble event at its frame of the loop clock."""

    __test__ = False

    def __init__(self, frame_s: float = 0.01) -> None:
        super().__init__()
        self.frame_s = frame_s
        self.events: list[tuple[int, str, Any]] = []

    def _frame(self) -> int:
        return round(asyncio.get_running_loop().time() / self.frame_s)

    def on_next(self, item: Any) -> None:
        self.events.append((self._frame(), "next", item))
        super().on_next(item)

    def on_error(self, error: BaseException) -> None:
        self.events.append((self._frame(), "error", None))
        super().on_error(error)

    def on_complete(self) -> None:
        self.events.append((self._frame(), "complete", None))
        super().on_complete()


def _expect(timeline: _Timeline, diagram: str) -> None:
    assert timeline.events == [(e.frame, e.kind, e.value if e.kind == "next" else None)
                               for e in testing.parse_marbles(diagram)], diagram


def _requests_at(loop: asyncio.AbstractEventLoop, ts: TestSubscriber[Any], diagram: str, frame_s: float = 0.01) -> None:
    """Schedule ``ts``'s requests of a demand diagram on the loop clock (before a Marbles run:
    in a frame, they act before the sources' events, as the marble kit's own demand marks)."""
    for frame, n in parse_demand(diagram):
        assert n is not None
        loop.call_at(frame * frame_s, ts.request, n)


def map_async_partitioned(block: Block) -> None:
    async def fn(x: str) -> str:
        await asyncio.sleep(3.0 if x.lower() == "a" else 6.0)
        return x

    for label, ordered in (("ordered", True), ("unordered", False)):
        assert_marbles(ops.map_async_partitioned(fn, 3, str.lower, ordered=ordered), source=block["source"],
                       demand=block["demand"], expected=block[label], frame_s=1.0)


def kill_switch(block: Block) -> None:
    async def main() -> None:
        switch = ops.kill_switch()
        m = Marbles()
        source = m.cold(block["source"])
        shutdown_at = len(block["output"]) - 1  # the column of its completion
        asyncio.get_running_loop().call_at(shutdown_at * 0.01, switch.shutdown)
        (await m.run(source.pipe(switch), demand=block["demand"])).expect(block["output"])
        assert source.cancelled_at == shutdown_at and switch.running == 0
    run_virtual(main())


def restart_with_backoff(block: Block) -> None:
    async def main() -> None:
        m = Marbles()
        runs = [m.cold(block[label].strip()) for label in ("source", "second", "third")]
        order = iter(runs)
        result = await m.run(ops.restart_with_backoff(lambda: next(order), 0.04, 0.16, jitter=0.0),
                             demand=block["demand"], frames=len(block["output"]))
        result.expect(block["output"])
        starts = [len(block[label]) - len(block[label].lstrip()) for label in ("second", "third")]
        assert [run.subscribed_at for run in runs] == [[0], [starts[0]], [starts[1]]]
    run_virtual(main())


def split_when(block: Block) -> None:
    async def main() -> None:
        m = Marbles()
        source = m.cold(block["source"])
        subs: list[_Timeline] = []

        def attach(substream: Any) -> None:
            subs.append(ts := _Timeline())
            substream.subscribe(ts)
            ts.request(UNBOUNDED)

        result = await m.run(source.pipe(ops.split_when(str.isupper), ops.tap(attach)), demand="^*")
        assert [e.frame for e in result.timeline] == [e.frame for e in testing.parse_marbles(block["main"])]
        for ts, label in zip(subs, ("x", "y", "z"), strict=True):
            _expect(ts, block[label])
    run_virtual(main())


class _Draws:
    """A ``random.Random`` whose draws are given (the ones a docstring diagram shows)."""

    def __init__(self, draws: list[float]) -> None:
        self.draws = iter(draws)

    def random(self) -> float:
        return next(self.draws)


def merge_prioritized(block: Block) -> None:
    import random

    class Scripted(random.Random):
        def __init__(self, draws: list[float]) -> None:
            super().__init__(0)
            self.script = iter(draws)

        def random(self) -> float:
            return next(self.script)

    async def main() -> None:
        m = Marbles()
        source, other = m.cold(block["source"]), m.cold(block["other"])
        op = ops.merge_prioritized(other, priorities=(3, 1), rng=Scripted([0.1, 0.9, 0.5, 0.8]))
        (await m.run(source.pipe(op), demand=block["demand"])).expect(block["output"])
    run_virtual(main())


def merge_hub(block: Block) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        m = Marbles()
        a, b = m.cold(block["a"]), m.cold(block["b"].strip())
        hub = ops.merge_hub(2)
        b_at = len(block["b"]) - len(block["b"].lstrip())
        loop.call_at(0.0, hub.attach, a)  # in frame 0 of the run
        loop.call_at(b_at * 0.01, hub.attach, b)
        loop.call_at(0.05, hub.drain_and_complete)  # after b attached: a producer attaching now is refused
        (await m.run(hub, demand=block["demand"])).expect(block["source"])
        assert a.subscribed_at == [0] and b.subscribed_at == [b_at] and hub.producers == 0
    run_virtual(main())


def hub_consumers(make: Callable[[], Any]) -> Callable[[Block], None]:
    """Play a hub's diagram: the upstream ``source``, consumers ``x`` and ``y`` attached in column
    0 with the demand of their lines, and what each gets (``x gets``, ``y gets``); ``upstream:``
    is the source's exact requests."""
    def run(block: Block) -> None:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            m = Marbles()
            source = m.cold(block["source"])
            hub = source.pipe(make())
            x, y = _Timeline(), _Timeline()
            loop.call_at(0.0, hub.subscribe, x)  # in frame 0 of the run, before the requests
            loop.call_at(0.0, hub.subscribe, y)
            _requests_at(loop, x, block["x"])
            _requests_at(loop, y, block["y"])
            await m.run(rx.never(), demand="", frames=len(block["source"]) + 10)
            _expect(x, block["x gets"])
            _expect(y, block["y gets"])
            if "upstream" in block:
                assert source.request_log == _requests(block["upstream"])
        run_virtual(main())
    return run


LLM_RUNNERS: dict[tuple[str, int], Callable[[Block], None]] = {
    ("ops.throttle", 0): kit(lambda: ops.throttle(100, 3, cost=int)),
    ("ops.conflate", 0): kit(lambda: ops.conflate(lambda a, b: a + b)),
    ("ops.keep_alive", 0): kit(lambda: ops.keep_alive(0.03, lambda: "k")),
    ("ops.map_async_partitioned", 0): map_async_partitioned,
    ("ops.kill_switch", 0): kill_switch,
    ("ops.restart_with_backoff", 0): restart_with_backoff,
    ("ops.split_when", 0): split_when,
    ("ops.merge_prioritized", 0): merge_prioritized,
    ("ops.merge_hub", 0): merge_hub,
    ("ops.broadcast_hub", 0): hub_consumers(lambda: ops.broadcast_hub(2)),
    ("ops.partition_hub", 0): hub_consumers(lambda: ops.partition_hub(lambda n, x: x % n, 8)),
}
RUNNERS.update(LLM_RUNNERS)


def connectable(make: Callable[[], Any], *, connect: bool = True,
                subscribed_at: list[int] | None = None) -> Callable[[Block], None]:
    """Play a hot operator's diagram: the cold upstream ``source``; consumers ``x``, ``y``, ``z``,
    each subscribed in the column of its first mark, requesting (``^n``) and cancelling (``!``)
    as its line says; ``connect()`` in column 0 (after the subscriptions there) when ``connect``;
    what each gets (``x gets`` ...); ``upstream:`` the source's exact requests."""
    def run(block: Block) -> None:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            m = Marbles()
            source = m.cold(block["source"].strip())
            hot = source.pipe(make())
            consumers = {label: _Timeline() for label in ("x", "y", "z") if label in block}
            actions: dict[int, list[Callable[[], Any]]] = {}
            for label, ts in consumers.items():
                marks = parse_demand(block[label])
                actions.setdefault(marks[0][0], []).append(lambda hot=hot, ts=ts: hot.subscribe(ts))
                for frame, n in marks:
                    actions.setdefault(frame, []).append(ts.cancel if n is None else lambda ts=ts, n=n: ts.request(n))
            if connect:
                actions.setdefault(0, []).append(hot.connect)
            for frame, calls in actions.items():  # one timer per frame: its calls in order
                loop.call_at(frame * 0.01, lambda calls=calls: [call() for call in calls])
            await m.run(rx.never(), demand="", frames=max(len(v) for v in block.values()) + 10)
            for label, ts in consumers.items():
                _expect(ts, block[f"{label} gets"])
            if "upstream" in block:
                assert source.request_log == _requests(block["upstream"])
            if subscribed_at is not None:
                assert source.subscribed_at == subscribed_at
        run_virtual(main())
    return run


def _behavior(value: str) -> Any:
    from reactivex.subject import BehaviorSubject

    return BehaviorSubject(value)


RUNNERS.update({
    ("ops.publish", 0): connectable(lambda: ops.publish()),
    ("ops.publish_value", 0): connectable(lambda: ops.publish_value("i")),
    ("ops.replay", 0): connectable(lambda: ops.replay(buffer_size=2)),
    ("ops.multicast", 0): connectable(lambda: ops.multicast(_behavior("i"))),
    ("ops.ref_count", 0): connectable(lambda: rx.pipe(ops.publish(), ops.ref_count()), connect=False,
                                      subscribed_at=[0, 6]),
    ("ops.share", 0): connectable(lambda: ops.share(), connect=False, subscribed_at=[0]),
})

FOUND = {(name, k): block for name, doc in _public_docs().items() for k, block in enumerate(diagrams(doc))}


def test_every_docstring_diagram_has_a_runner() -> None:
    assert sorted(FOUND) == sorted(RUNNERS)


@pytest.mark.parametrize("key", sorted(RUNNERS), ids=lambda key: f"{key[0]}#{key[1]}")
def test_docstring_diagram(key: tuple[str, int]) -> None:
    RUNNERS[key](FOUND[key])
