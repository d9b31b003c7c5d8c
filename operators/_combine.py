"""``zip``, ``combine_latest``, ``with_latest_from``, ``concat``: several sources into one (DESIGN §3).

Written on :class:`rxpipe.stage.Stage`: the source is the stage's main upstream, each other
source an input (``open_input``, key = its position 1, 2, ...), listed in the graph through
``graph_inputs``. What a source has delivered and the stage keeps counts as that source's
``held`` (the stage's own for the main one), so each source's window bounds its own items:

- ``zip``: one queue per source, window ``prefetch`` each (75 % replenish); a tuple is emitted
  as soon as every queue has an item and waits for downstream demand in the kit's output queue,
  which counts against every source's window.
- ``combine_latest``: window ``prefetch`` per source; each arrival is applied at once and its
  tuple emitted (waiting for demand in the output queue, counted against every window); one before
  every source has a value only updates the latest values (no tuple, its credit freed at once).
- ``with_latest_from``: the others are requested without bound and keep only their latest value;
  the source is demand-driven (``prefetch=None``), and its inputs get credit first
  (``inputs_first``) so a synchronous source meets the others' values.
- ``concat``: demand-driven; the next source is subscribed when the previous one completed and
  inherits the outstanding demand.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rxpipe import UNBOUNDED, Flowable
from rxpipe.stage import Input, Stage, operator

__all__ = ["Zip", "CombineLatest", "WithLatestFrom", "Concat", "ZipLatest", "ZipWithIterable", "zip_stage",
           "combine_latest_stage", "zip_latest_stage", "zip_with_iterable_stage",
           "with_latest_from_stage", "concat_stage"]


class _Sources(Stage):
    """A stage over the source (position 0) and ``others`` (positions 1, 2, ..., opened at start)."""

    #: the others' credit (None: demand-driven; an int window; UNBOUNDED)
    others_prefetch: int | None = None

    def __init__(self, others: tuple[Flowable[Any], ...]) -> None:
        self.others = others
        self.links: list[Input | None] = [None]  # position -> its input (None: the main upstream)
        self.held = 0

    @classmethod
    def graph_inputs(cls, others: tuple[Flowable[Any], ...], *args: Any, **kwargs: Any) -> tuple[Flowable[Any], ...]:
        return others

    def open_others(self) -> None:
        for position, other in enumerate(self.others, 1):
            self.links.append(self.open_input(other, prefetch=self.others_prefetch, key=position))

    def count(self, position: int, delta: int) -> None:
        """``delta`` more items of source ``position`` kept by the stage (its credit's ``held``)."""
        link = self.links[position]
        if link is None:
            self.held += delta
        else:
            link.held += delta


# -- zip -----------------------------------------------------------------------------------------------
class Zip(_Sources):
    """One run of ``zip``. State: ``queues`` (per source, items not yet in a tuple), ``ended``
    (per source, completed)."""

    kind = "zip"

    def __init__(self, others: tuple[Flowable[Any], ...], prefetch: int) -> None:
        super().__init__(others)
        self.prefetch = self.others_prefetch = prefetch  # type: ignore[misc]
        self.queues: list[deque[Any]] = [deque() for _ in range(len(others) + 1)]
        self.ended = [False] * (len(others) + 1)

    def on_start(self) -> None:
        self.open_others()

    def on_next(self, item: Any) -> None:
        self.queues[0].append(item)
        self.held += 1
        self.pump()

    def on_input_next(self, input: Input, item: Any) -> None:
        self.queues[input.key].append(item)
        input.held += 1
        self.pump()

    def on_complete(self) -> None:
        self.ended[0] = True
        self.pump()

    def on_input_complete(self, input: Input) -> None:
        self.ended[input.key] = True
        self.pump()

    def pump(self) -> None:
        # A tuple leaves as soon as every source has an item: it waits for downstream demand in
        # the kit's output queue, which counts against every source's window (so a slow consumer
        # pauses every source and costs each one request per round).
        queues = self.queues
        while all(queues):
            values = tuple(queue.popleft() for queue in queues)
            for position in range(len(queues)):
                self.count(position, -1)
            self.emit(values)
        for queue, ended in zip(queues, self.ended, strict=True):
            if ended and not queue:  # that source has nothing more to pair
                self.complete()
                return


zip_stage = operator(Zip)


# -- combine_latest -----------------------------------------------------------------------------------
class CombineLatest(_Sources):
    """One run of ``combine_latest``. State: ``latest`` (per source, its last value, or NOTHING),
    ``missing`` (sources without a value yet), ``received`` / ``ended`` (per source)."""

    kind = "combine_latest"

    def __init__(self, others: tuple[Flowable[Any], ...], prefetch: int) -> None:
        super().__init__(others)
        self.prefetch = self.others_prefetch = prefetch  # type: ignore[misc]
        n = len(others) + 1
        self.latest: list[Any] = [Stage.NOTHING] * n
        self.missing = n
        self.received = [False] * n
        self.ended = [False] * n

    def on_start(self) -> None:
        self.open_others()

    def on_next(self, item: Any) -> None:
        self.arrive(0, item)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.arrive(input.key, item)

    def arrive(self, position: int, item: Any) -> None:
        """Apply one arrival: the latest values change, and the tuple they make (once every
        source has a value) is emitted; it waits for downstream demand in the output queue."""
        self.received[position] = True
        latest = self.latest
        if latest[position] is Stage.NOTHING:
            self.missing -= 1
        latest[position] = item
        if self.missing == 0:
            self.emit(tuple(latest))
        elif all(ended for k, ended in enumerate(self.ended) if k != position):
            # every other source ended and one of them never had a value: no tuple can come
            # (reactivex completes here, on this item)
            self.complete()

    def on_complete(self) -> None:
        self.source_ended(0)

    def on_input_complete(self, input: Input) -> None:
        self.source_ended(input.key)

    def source_ended(self, position: int) -> None:
        self.ended[position] = True
        if all(self.ended):
            # every source ended: the tuples emitted go out first. A source that ended empty
            # does not end the stream by itself (reactivex: the stream ends when all have, or
            # at an item of the last one running, see arrive; Reactor and RxJS stop at once).
            self.complete()


combine_latest_stage = operator(CombineLatest)


# -- with_latest_from ---------------------------------------------------------------------------------
class WithLatestFrom(_Sources):
    """One run of ``with_latest_from``. State: ``latest`` (per other, its last value or NOTHING),
    ``missing`` (others without a value yet)."""

    prefetch = None  # the source: demand passed through; an item without partners asks for one more
    others_prefetch = UNBOUNDED
    inputs_first = True
    kind = "with_latest_from"

    def __init__(self, others: tuple[Flowable[Any], ...]) -> None:
        super().__init__(others)
        self.latest: list[Any] = [Stage.NOTHING] * len(others)
        self.missing = len(others)

    def on_start(self) -> None:
        self.open_others()

    def on_input_next(self, input: Input, item: Any) -> None:
        position = input.key - 1
        if self.latest[position] is Stage.NOTHING:
            self.missing -= 1
        self.latest[position] = item

    def on_next(self, item: Any) -> None:
        if not self.missing:
            self.emit((item, *self.latest))

    # on_input_complete: the other's last value stays (reactivex); on_input_error: fail (default)


with_latest_from_stage = operator(WithLatestFrom)


# -- concat ----------------------------------------------------------------------------------------------
class Concat(_Sources):
    """One run of ``concat``. State: ``next_position`` (the next source to subscribe to)."""

    prefetch = None  # demand-driven: each source is asked only what downstream still wants
    kind = "concat"

    def __init__(self, others: tuple[Flowable[Any], ...]) -> None:
        super().__init__(others)
        self.next_position = 0

    def on_next(self, item: Any) -> None:
        self.emit(item)

    def on_complete(self) -> None:
        self.subscribe_next()

    def on_input_complete(self, input: Input) -> None:
        self.subscribe_next()

    def subscribe_next(self) -> None:
        if self.next_position == len(self.others):
            self.complete()
            return
        other = self.others[self.next_position]
        self.next_position += 1
        self.open_input(other, prefetch=None)


concat_stage = operator(Concat)


# -- zip_latest, zip_with_iterable (third round) ---------------------------------------------------------
class ZipLatest(_Sources):
    """One run of ``zip_latest``: a tuple each time every source has a value it has not been in a
    tuple with (reactivex's "fresh" mask). A source's newer value replaces its fresh one (the older
    is dropped, counted ``"superseded"``). Completes when a source ended without a fresh value, or
    at the tuple after any source ended. State: ``latest``, ``fresh``, ``ended``."""

    kind = "zip_latest"

    def __init__(self, others: tuple[Flowable[Any], ...], prefetch: int) -> None:
        super().__init__(others)
        self.prefetch = self.others_prefetch = prefetch  # type: ignore[misc]
        n = len(others) + 1
        self.latest: list[Any] = [Stage.NOTHING] * n
        self.fresh = [False] * n
        self.ended = [False] * n

    def on_start(self) -> None:
        self.open_others()

    def on_next(self, item: Any) -> None:
        self.arrive(0, item)

    def on_input_next(self, input: Input, item: Any) -> None:
        self.arrive(input.key, item)

    def arrive(self, position: int, item: Any) -> None:
        if self.fresh[position]:
            self.drop(self.latest[position], "superseded")
        self.latest[position] = item
        self.fresh[position] = True
        if all(self.fresh):
            self.fresh = [False] * len(self.fresh)
            self.emit(tuple(self.latest))
            if any(self.ended):
                self.complete()

    def on_complete(self) -> None:
        self.source_ended(0)

    def on_input_complete(self, input: Input) -> None:
        self.source_ended(input.key)

    def source_ended(self, position: int) -> None:
        self.ended[position] = True
        if not self.fresh[position]:  # its last value was used, or it never had one: no tuple can come
            self.complete()


zip_latest_stage = operator(ZipLatest)


class ZipWithIterable(Stage):
    """``(item, next(iterator))`` per item; the iterator's end completes the stream (upstream
    cancelled). The iterator is made per subscription, at its first item."""

    log_hook_errors = False  # a raising iterator is the stream's error
    prefetch = None
    kind = "zip_with_iterable"

    def __init__(self, second: Any) -> None:
        self.second = second
        self.iterator: Any = None

    def on_start(self) -> None:
        self.iterator = iter(self.second)

    def on_next(self, item: Any) -> None:
        try:
            other = next(self.iterator)
        except StopIteration:
            self.complete()
            return
        self.emit((item, other))


zip_with_iterable_stage = operator(ZipWithIterable)
