"""``partition`` / ``partition_indexed``: two Flowables of one upstream, the items for which the
predicate holds and the others (DESIGN §3, third round).

The predicate runs once per item (reactivex calls it once per branch): the upstream's items are
tagged ``(holds, item)`` by a fused ``map`` (or ``map_indexed``), then ``broadcast(2)`` shares
them and each branch keeps its own and unwraps it (a filter and a map, fused). Demand is
broadcast's: the upstream is asked, in total, for the minimum over the two branches, and each
branch's filter asks one more per item of the other branch, so the slowest branch governs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from rxpipe import Subscriber
from rxpipe._fusion import fuse
from rxpipe.flowable import Flowable

from ._broadcast import BroadcastFlowable
from ._one_to_one import map_indexed_stage

__all__ = ["PartitionFlowable"]


def _holds(pair: tuple[bool, Any]) -> bool:
    return pair[0]


def _fails(pair: tuple[bool, Any]) -> bool:
    return not pair[0]


def _item(pair: tuple[bool, Any]) -> Any:
    return pair[1]


class PartitionFlowable(Flowable[Any]):
    """The result of ``source.pipe(ops.partition(p))``: unpack it (``evens, odds = ...``) or
    index it, as reactivex's list of two. Subscribing to it itself signals ``TypeError``."""

    kind = "partition"

    def __init__(self, source: Flowable[Any], predicate: Callable[..., Any], indexed: bool, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        if indexed:
            tagged = map_indexed_stage(lambda x, i: (bool(predicate(x, i)), x), name=f"{self.name}.tag")(source)
        else:
            tagged = fuse(source, "map", f"{self.name}.tag", lambda x: (bool(predicate(x)), x))
        shared = BroadcastFlowable(tagged, 2, f"{self.name}.share")
        self.branches: tuple[Flowable[Any], Flowable[Any]] = tuple(  # type: ignore[assignment]
            fuse(fuse(branch, "filter", f"{self.name}[{k}]", keep), "map", f"{self.name}[{k}].item", _item)
            for k, (branch, keep) in enumerate(zip(shared.branches, (_holds, _fails), strict=True)))

    def __iter__(self) -> Iterator[Flowable[Any]]:
        return iter(self.branches)

    def __getitem__(self, k: int) -> Flowable[Any]:
        return self.branches[k]

    def __len__(self) -> int:
        return 2

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        raise TypeError(f"subscribe to the two Flowables of {self.name!r}: "
                        f"holds, fails = source.pipe(ops.partition(p)); holds.subscribe(...); fails.subscribe(...)")
