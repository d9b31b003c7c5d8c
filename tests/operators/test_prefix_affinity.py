"""prefix_affinity: same prefix, same branch while it has demand; elsewhere when it has none or lags
too far; the index stays within its bound."""

from __future__ import annotations

from typing import Any

import pytest

from rxpipe import UNBOUNDED
from rxpipe import operators as ops
from rxpipe.engines import CompletionRequest
from rxpipe.testing import TestPublisher, TestSubscriber

from .test_balance import Probe

A, B = "a" * 64 + "A" * 64, "b" * 64 + "B" * 64  # two prefixes of two 64-character blocks


def wire(affinity: Any, *demands: int) -> tuple[TestPublisher[Any], list[Probe]]:
    pub = TestPublisher[Any]()
    probes = [Probe() for _ in demands]
    pub.pipe(ops.balance(*probes, affinity=affinity)).subscribe(TestSubscriber[Any](initial_request=UNBOUNDED))
    for probe, demand in zip(probes, demands, strict=True):
        probe.ts.request(demand)
    return pub, probes


def test_same_prefix_goes_to_the_same_branch_while_it_has_demand_and_elsewhere_when_not() -> None:
    affinity = ops.prefix_affinity()
    pub, (x, y) = wire(affinity, 4, 4)
    pub.emit(A + "1", B + "1", A + "2", A + "3", B + "2", A + "4")
    # A1 to x (both 4: round-robin), B1 to y (most demand), then each prefix follows its branch
    assert x.ts.values == [A + "1", A + "2", A + "3", A + "4"]
    assert y.ts.values == [B + "1", B + "2"]
    pub.emit(A + "5")  # x has no demand left: y gets it (no demand, no work)
    assert y.ts.values == [B + "1", B + "2", A + "5"] and len(x.ts.values) == 4
    x.ts.request(1)
    pub.emit(B + "3")  # y has the most demand (2 vs 1) and the prefix
    assert y.ts.values[-1] == B + "3"
    assert (affinity.routed_by_match, affinity.routed_by_demand) == (5, 3)
    # chat requests: the same system prompt is the same prefix
    chat = [CompletionRequest(messages=[{"role": "system", "content": A}, {"role": "user", "content": f"q{i}"}])
            for i in range(2)]
    x.ts.request(2)
    y.ts.request(3)
    pub.emit(chat[0], chat[1])  # x and y have 3 each: the first by round-robin, the second follows it
    assert (chat[0] in x.ts.values) == (chat[1] in x.ts.values)
    assert (chat[0] in y.ts.values) == (chat[1] in y.ts.values)


def test_a_hot_prefix_spills_over_once_its_branch_lags_the_best_demand_by_the_threshold() -> None:
    pub, (x, y) = wire(ops.prefix_affinity(balance_abs=2, balance_rel=1.5), 8, 8)
    pub.emit(*[A + str(i) for i in range(4)])
    # x: 8, 7, 6 free when A0..A2 arrive; at A3 x has 5 and y 8: lag 3 > 2 and 8 > 1.5 * 5
    assert x.ts.values == [A + "0", A + "1", A + "2"] and y.ts.values == [A + "3"]
    pub.emit(A + "4")  # both hold A now: the one with more demand
    assert y.ts.values == [A + "3", A + "4"]


def test_a_match_below_min_match_routes_by_demand() -> None:
    pub, (x, y) = wire(ops.prefix_affinity(min_match=0.5), 4, 4)
    common = "c" * 64
    pub.emit(common + "x" * 192, common + "y" * 192)  # 1 of 4 blocks in common: below half
    assert len(x.ts.values) == len(y.ts.values) == 1


def test_the_index_stays_within_its_bound_under_100k_distinct_prompts() -> None:
    affinity = ops.prefix_affinity(max_blocks=1000)
    pub, probes = wire(affinity, UNBOUNDED, UNBOUNDED)
    for i in range(100_000):
        pub.emit(f"{i:064d}" + "q" * 64)
        if i % 10_000 == 9_999:
            assert affinity.blocks(0) <= 1000 and affinity.blocks(1) <= 1000
    assert affinity.blocks(0) == affinity.blocks(1) == 1000
    assert sum(len(p.ts.values) for p in probes) == 100_000
    # what is remembered is the most recent: the last prompts match, the first ones were forgotten
    last, first = f"{99_999:064d}" + "q" * 64, f"{0:064d}" + "q" * 64
    assert any(len(affinity.chain(last)) == 2 and all(n in affinity.index[k] for n in affinity.chain(last))
               for k in (0, 1))
    assert not any(n in affinity.index[k] for n in affinity.chain(first) for k in (0, 1))


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="block_chars"):
        ops.prefix_affinity(block_chars=0)
    with pytest.raises(ValueError, match="max_blocks"):
        ops.prefix_affinity(max_blocks=0)
    with pytest.raises(ValueError, match="balance_rel"):
        ops.prefix_affinity(balance_rel=0.5)
    with pytest.raises(ValueError, match="min_match"):
        ops.prefix_affinity(min_match=2)
    with pytest.raises(TypeError, match="routing policy"):
        ops.balance(Probe(), affinity=object())  # type: ignore[arg-type]
    affinity = ops.prefix_affinity()
    ops.balance(Probe(), Probe(), affinity=affinity)
    with pytest.raises(ValueError, match="one per balance"):
        ops.balance(Probe(), Probe(), Probe(), affinity=affinity)
