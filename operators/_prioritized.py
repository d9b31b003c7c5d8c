"""``merge_prioritized``: merge sources, picking among those with items ready at random,
weighted by their priorities (Akka ``MergePrioritized`` / ``mergePrioritizedN``).

Written on :class:`rxpipe.stage.Stage`: the source is the main upstream (position 0), each other
source an input (position 1, 2, ...). Each keeps a queue of the items it delivered, counted in its
``held``, within its own window of ``prefetch`` items; an item is picked only when downstream
asks, so nothing waits in the output queue and every pick sees every ready input.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any, Sequence

from rxpipe.flowable import Flowable, Operator
from rxpipe.stage import Input, Stage, operator

from ._args import check_int_arg
from ._publishers import publisher_problem

__all__ = ["merge_prioritized", "MergePrioritized"]


class MergePrioritized(Stage):
    """One run: ``queues`` (position -> items delivered and not emitted), ``links`` (position ->
    its input; None for the main upstream), ``live`` (sources not yet ended)."""

    kind = "merge_prioritized"

    def __init__(self, others: tuple[Flowable[Any], ...], priorities: tuple[int, ...], eager_complete: bool,
                 prefetch: int, rng: random.Random) -> None:
        self.others = others
        self.priorities = priorities
        self.eager_complete = eager_complete
        self.prefetch = prefetch  # type: ignore[misc]  # the window of every source
        self.rng = rng
        self.queues: list[deque[Any]] = [deque() for _ in priorities]
        self.links: list[Input | None] = [None]
        self.live = len(priorities)
        self.held = 0

    @classmethod
    def graph_inputs(cls, others: tuple[Flowable[Any], ...], *args: Any, **kwargs: Any) -> tuple[Flowable[Any], ...]:
        return others

    def on_start(self) -> None:
        for position, other in enumerate(self.others, 1):
            self.links.append(self.open_input(other, prefetch=self.prefetch, key=position))

    def arrived(self, position: int, item: Any) -> None:
        self.queues[position].append(item)
        link = self.links[position]
        if link is None:
            self.held += 1
        else:
            link.held += 1
        self.pick()

    def pick(self, flush: bool = False) -> None:
        """Emit while downstream wants (everything with ``flush``) and some source has an item:
        one weighted draw per pick among the sources with items ready (none when only one has)."""
        queues, priorities = self.queues, self.priorities
        while flush or self.demanded:
            ready = [p for p, q in enumerate(queues) if q]
            if not ready:
                break
            chosen = ready[0]
            if len(ready) > 1:
                point = self.rng.random() * sum(priorities[p] for p in ready)
                for chosen in ready:
                    point -= priorities[chosen]
                    if point < 0:
                        break
            link = self.links[chosen]
            if link is None:
                self.held -= 1
            else:
                link.held -= 1
            self.emit(queues[chosen].popleft())
        if self.live == 0 and not any(queues):
            self.complete()

    def ended(self) -> None:
        self.live -= 1
        if self.eager_complete and self.live:
            # one source ended: the stream ends after what was delivered, in priority order
            self.live = 0
            self.pick(flush=True)
        elif self.live == 0 and not any(self.queues):
            self.complete()

    def on_next(self, item: Any) -> None:
        self.arrived(0, item)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.arrived(input.key, item)

    def on_request(self, n: int) -> None:
        self.pick()

    def on_complete(self) -> None:
        self.ended()

    def on_input_complete(self, input: Input) -> None:
        self.ended()

    def on_error(self, error: BaseException) -> None:
        self.dropped_and_fail(error)

    def on_input_error(self, input: Input, error: BaseException) -> None:
        self.dropped_and_fail(error)

    def dropped_and_fail(self, error: BaseException) -> None:
        for queue in self.queues:
            while queue:
                self.drop(queue.popleft(), "error")
        self.held = 0
        for link in self.links:
            if link is not None:
                link.held = 0
        self.fail(error)


_merge_prioritized_stage = operator(MergePrioritized)


def merge_prioritized(*others: Flowable[Any], priorities: Sequence[int], eager_complete: bool = False,
                      prefetch: int = 16, rng: random.Random | None = None, name: str | None = None) -> Operator:
    """Merge the source and ``others``; when several have items ready, pick one at random with
    probability proportional to its priority (e.g. interactive requests before batch ones,
    without starving the batch ones).

        source:  (abc|)
        other:   (xy|)
        demand:  ----^5
        output:  ----(axbyc|)      priorities=(3, 1); the draws of this run: 0.1, 0.9, 0.5, 0.8

    Both sources' items are ready when downstream asks: each pick draws ``u`` in [0, 1) and
    takes the source whose share of ``u * (3 + 1)`` it falls in (source below 3, other above);
    ``c`` is the only item left, so it needs no draw.
    ``priorities`` has one positive int per source, the source first: with ``(9, 1)`` a pick
    among both takes the source with probability 9/10; a source with nothing ready never delays
    another: while downstream waits, an arriving item goes at once (there is nothing to choose
    from), so priorities shape the output when downstream is the slower side, as Akka's do.
    Completes when every source completed and its items went out, or, with
    ``eager_complete=True``, when any one completes (the others are cancelled; what they
    delivered still goes out).
    Demand: emits only what downstream requested, in total. Each source has its own window of
    ``prefetch`` items (requested at subscribe, replenished by 75 %): its outstanding requests
    plus its queued items never exceed ``prefetch``.
    Args: others (Flowables); priorities (ints >= 1, ``1 + len(others)`` of them); prefetch
        (items per source, >= 1); rng (a ``random.Random``, seedable; default a new one).
    Signals: TypeError/ValueError (raised here) for a source that is not a Flowable or bad
        priorities; an error from any source cancels the others and is signalled at once (the
        queued items dropped, reason ``"error"``); cancel reaches every source.
    Anchor: Akka ``MergePrioritized(priorities, eagerComplete)`` / ``mergePrioritizedN``.
    """
    for other in others:
        problem = publisher_problem(other)
        if problem is not None or not isinstance(other, Flowable):
            raise TypeError(f"merge_prioritized() needs Flowables, got {other!r}")
    weights = tuple(priorities)
    if len(weights) != 1 + len(others):
        raise ValueError(f"merge_prioritized(priorities) needs {1 + len(others)} priorities (the source first), "
                         f"got {len(weights)}")
    for weight in weights:
        check_int_arg("merge_prioritized", "priorities", weight, 1)
    check_int_arg("merge_prioritized", "prefetch", prefetch, 1)
    if rng is not None and not isinstance(rng, random.Random):
        raise TypeError(f"merge_prioritized(rng=) needs a random.Random, got {rng!r}")
    return _merge_prioritized_stage(tuple(others), weights, bool(eager_complete), prefetch,
                                    rng if rng is not None else random.Random(), name=name)
