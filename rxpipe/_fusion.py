"""Operator fusion for the synchronous operators (map, filter, scan, take, skip, tap).

Consecutive synchronous stages are compiled into **one** Python function per chain (generated
source, compiled once per chain and instantiated per subscription), so an item crosses the whole
chain in one call with no per-stage subscriber hop. Two ways to run a compiled chain:

- *source fusion* (Reactor's macro-fusion): over rxpipe's own iterable sources the drain loop
  iterates the source and calls the chain directly; a dropped item simply does not count
  against demand.
- *subscriber mode*: over any other Flowable the chain is one subscriber; demand passes through
  exactly, and each dropped item (filter, skip) asks upstream for one more (DESIGN §2).

The chain function returns 1 if it delivered an item downstream, 0 if it dropped it or failed.
A user function that raises (or a map/scan returning None, §2.13 → TypeError) cancels upstream
and signals the exception downstream. ``take`` always ends a chain: what follows it runs as a new
chain in subscriber mode, and in subscriber mode the chain never requests more than ``take``
still allows (Reactor's ``take`` with ``limitRequest``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ._demand import EMPTY_SUBSCRIPTION, DrainSubscription, InternalSubscriber, log
from ._protocol import UNBOUNDED, Subscriber, Subscription
from .flowable import Flowable

__all__ = ["Stage", "FusedFlowable", "SyncSource", "fuse"]

_END = object()


@dataclass(frozen=True, slots=True)
class Stage:
    """One synchronous operator inside a fused chain.

    ``kind`` is one of map, filter, scan, take, skip, tap; ``fn`` the user function (for tap,
    its ``on_next``); ``arg`` the seed of scan or the count of take/skip.
    """

    kind: str
    name: str
    fn: Callable[..., Any] | None = None
    arg: Any = None
    on_error: Callable[[BaseException], Any] | None = None
    on_complete: Callable[[], Any] | None = None


def _none_error(stage: Stage) -> TypeError:
    return TypeError(f"{stage.kind} stage {stage.name!r} produced None; items are never None "
                     f"(Reactive Streams §2.13)")


class Program:
    """A fused chain compiled to a factory of ``on_next(item) -> 0 | 1`` functions."""

    __slots__ = ("stages", "_factory", "take_count", "has_hooks")

    def __init__(self, stages: tuple[Stage, ...]) -> None:
        self.stages = stages
        last = stages[-1] if stages else None
        self.take_count: int | None = last.arg if last is not None and last.kind == "take" else None
        self.has_hooks = any(s.kind == "tap" and (s.on_error or s.on_complete) for s in stages)
        self._factory = self._compile()

    def _compile(self) -> Callable[..., Callable[[Any], int]]:
        params = ["down", "fail", "finish", "none_error"]
        state: list[str] = []
        inits: list[str] = []
        body: list[str] = []
        for k, stage in enumerate(self.stages):
            f = f"f{k}"
            params.append(f)
            catch = ["    except Exception as e:", f"        return fail(e, {k})"]
            if stage.kind == "map":
                body += ["    try:", f"        x = {f}(x)", *catch,
                         "    if x is None:", f"        return fail(none_error({k}), {k})"]
            elif stage.kind == "filter":
                body += ["    try:", f"        if not {f}(x):", "            return 0", *catch]
            elif stage.kind == "tap":
                if stage.fn is not None:
                    body += ["    try:", f"        {f}(x)", *catch]
            elif stage.kind == "scan":
                params.append(f"seed{k}")
                state.append(f"acc{k}")
                inits.append(f"    acc{k} = seed{k}")
                body += ["    try:", f"        x = acc{k} = {f}(acc{k}, x)", *catch,
                         "    if x is None:", f"        return fail(none_error({k}), {k})"]
            elif stage.kind == "skip":
                params.append(f"n{k}")
                state.append(f"c{k}")
                inits.append(f"    c{k} = 0")
                body += [f"    if c{k} < n{k}:", f"        c{k} += 1", "        return 0"]
            elif stage.kind == "take":
                assert k == len(self.stages) - 1, "take ends a fused chain"
                params.append(f"n{k}")
                state.append(f"c{k}")
                inits.append(f"    c{k} = 0")
                body += [f"    c{k} += 1", f"    if c{k} >= n{k}:", "        down(x)",
                         "        finish()", "        return 1"]
            else:  # pragma: no cover - guarded by the factories
                raise ValueError(f"unknown stage kind {stage.kind!r}")
        lines = [f"def factory({', '.join(params)}):", *inits, "    def on_next(x):"]
        if state:
            lines.append(f"        nonlocal {', '.join(state)}")
        lines += ["    " + line for line in body]
        lines += ["        down(x)", "        return 1", "    return on_next"]
        namespace: dict[str, Any] = {}
        exec(compile("\n".join(lines), f"<rxpipe fused {'→'.join(s.name for s in self.stages)}>",
                     "exec"), namespace)
        return namespace["factory"]

    def instantiate(self, down: Callable[[Any], Any], fail: Callable[[BaseException, int], int],
                    finish: Callable[[], None]) -> Callable[[Any], int]:
        args: list[Any] = []
        stages = self.stages
        for stage in stages:
            args.append(stage.fn)
            if stage.kind in ("scan", "skip", "take"):
                args.append(stage.arg)
        return self._factory(down, fail, finish, lambda k: _none_error(stages[k]), *args)

    # -- terminal hooks of tap ------------------------------------------------------------------
    def complete_hooks(self, after: int = -1) -> BaseException | None:
        """Run tap ``on_complete`` hooks of stages after index ``after``; return an error if one
        raised (the stream then ends with that error, and later taps see ``on_error``)."""
        for k, stage in enumerate(self.stages):
            if k <= after or stage.kind != "tap" or stage.on_complete is None:
                continue
            try:
                stage.on_complete()
            except Exception as error:
                self.error_hooks(error, k)
                return error
        return None

    def error_hooks(self, error: BaseException, after: int = -1) -> None:
        """Run tap ``on_error`` hooks of stages after index ``after`` (a raising hook is logged)."""
        for k, stage in enumerate(self.stages):
            if k <= after or stage.kind != "tap" or stage.on_error is None:
                continue
            try:
                stage.on_error(error)
            except Exception:
                log.exception("tap stage %r: on_error hook raised while handling %r",
                              stage.name, error)


class SyncSource(Flowable[Any]):
    """A source over an iterable: ``from_iterable``, ``range``, ``just``, ``empty``.

    ``iter()`` is called per subscription (cold; a one-shot iterator serves one subscriber).
    Emits exactly what is requested; completes without demand once the iterable is exhausted
    (immediately for an empty sized iterable; a plain iterator is peeked one item ahead once its
    demand is met, as Reactor's ``Iterator.hasNext`` does).
    """

    def __init__(self, iterable: Iterable[Any], kind: str, name: str | None = None) -> None:
        self.kind = kind
        super().__init__(name=name)
        self.iterable = iterable

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        _subscribe_iterable(self.iterable, subscriber, None)


def _subscribe_iterable(iterable: Iterable[Any], subscriber: Subscriber[Any],
                        program: Program | None) -> None:
    try:
        iterator = iter(iterable)
    except Exception as error:
        subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
        subscriber.on_error(error)
        return
    subscription = IterSubscription(subscriber, iterator, program)
    subscriber.on_subscribe(subscription)
    subscription.start()


class IterSubscription(DrainSubscription):
    """Drains an iterator into a subscriber, optionally through a fused chain (source fusion)."""

    __slots__ = ("iterator", "source_iterator", "program", "chain")

    def __init__(self, downstream: Subscriber[Any], iterator: Iterator[Any],
                 program: Program | None) -> None:
        super().__init__(downstream)
        self.iterator = iterator
        #: the iterator made by iter(); closed on cancel (self.iterator may wrap a peeked item)
        self.source_iterator = iterator
        self.program = program
        self.chain: Callable[[Any], int] | None = None
        if program is not None:
            self.chain = program.instantiate(downstream.on_next, self._stage_failed, self._take_done)

    def start(self) -> None:
        """After ``on_subscribe``: complete at once if the iterable is known to be empty."""
        if self.program is not None and self.program.take_count == 0:
            self._take_done()
        elif not self.cancelled and self.requested == 0 and _known_exhausted(self.iterator):
            self._complete()

    def _drain(self) -> None:
        r = self.requested
        if r == 0:
            return
        e = 0
        chain = self.chain
        try:
            # Invariant: e items delivered in this pass, e <= r. The per-item `cancelled` check
            # makes a cancel from inside on_next stop the source at once (§3.7).
            if chain is None:
                on_next = self.downstream.on_next
                for x in self.iterator:
                    on_next(x)
                    e += 1
                    if e == r or self.cancelled:
                        break
                else:
                    self.emitted += e
                    self._complete()
                    return
            else:
                for x in self.iterator:
                    e += chain(x)
                    if e == r or self.cancelled:
                        break
                else:
                    self.emitted += e
                    self._complete()
                    return
        except Exception as error:  # raised by the user's iterator
            self.emitted += e
            self._error(error)
            return
        self.emitted += e
        if self.cancelled:
            return
        if r != UNBOUNDED:
            self.requested -= e
        if self.requested == 0:
            self._complete_if_exhausted()

    def _complete_if_exhausted(self) -> None:
        iterator = self.iterator
        if hasattr(iterator, "__length_hint__"):
            if iterator.__length_hint__() == 0:
                self._complete()
            return
        try:
            head = next(iterator, _END)
        except Exception as error:
            self._error(error)
            return
        if head is _END:
            self._complete()
        else:
            self.iterator = itertools.chain((head,), iterator)

    def _complete(self) -> None:
        if self.cancelled:
            return
        if self.program is not None and self.program.has_hooks:
            error = self.program.complete_hooks()
            if error is not None:
                self._error_after_hooks(error)
                return
        super()._complete()

    def _error(self, error: BaseException) -> None:
        if self.cancelled:
            return
        if self.program is not None and self.program.has_hooks:
            self.program.error_hooks(error)
        self._error_after_hooks(error)

    def _error_after_hooks(self, error: BaseException) -> None:
        super()._error(error)

    def _stage_failed(self, error: BaseException, stage: int) -> int:
        if not self.cancelled:
            assert self.program is not None
            self.program.error_hooks(error, stage)
            super()._error(error)
        return 0

    def _take_done(self) -> None:
        DrainSubscription._complete(self)

    def _release(self) -> None:
        close = getattr(self.source_iterator, "close", None)
        if close is not None:
            try:
                close()
            except ValueError:  # "generator already executing": it is closing itself
                pass
            except Exception:
                log.exception("closing the source iterator raised")


def _known_exhausted(iterator: Iterator[Any]) -> bool:
    hint = getattr(iterator, "__length_hint__", None)
    return hint is not None and hint() == 0


class FusedSubscriber(InternalSubscriber, Subscription):
    """A compiled chain running in subscriber mode over any Flowable (see module docstring)."""

    __slots__ = ("downstream", "program", "upstream", "chain", "done", "unbounded", "forwarded")

    def __init__(self, downstream: Subscriber[Any], program: Program) -> None:
        self.downstream = downstream
        self.program = program
        self.upstream: Subscription | None = None
        self.done = False
        self.unbounded = False
        self.forwarded = 0
        self.chain = program.instantiate(downstream.on_next, self._stage_failed, self._take_done)

    # upstream → downstream
    def on_subscribe(self, subscription: Subscription) -> None:
        if self.upstream is not None:
            subscription.cancel()
            return
        self.upstream = subscription
        self.downstream.on_subscribe(self)

    def on_next(self, item: Any) -> None:
        if self.done:
            return
        if not self.chain(item) and not self.done and not self.unbounded:
            self.upstream.request(1)  # type: ignore[union-attr]  # a dropped item asks one more

    def on_error(self, error: BaseException) -> None:
        if self.done:
            return
        self.done = True
        self.program.error_hooks(error)
        self.downstream.on_error(error)

    def on_complete(self) -> None:
        if self.done:
            return
        self.done = True
        error = self.program.complete_hooks()
        if error is not None:
            self.downstream.on_error(error)
        else:
            self.downstream.on_complete()

    # downstream → upstream
    def request(self, n: int) -> None:
        if self.done:
            return
        take = self.program.take_count
        if n > 0:
            if take is not None:
                n = min(n, take - self.forwarded)
                if n <= 0:
                    return
                self.forwarded += n
            elif n >= UNBOUNDED:
                self.unbounded = True
        self.upstream.request(n)  # type: ignore[union-attr]

    def cancel(self) -> None:
        if self.done:
            return
        self.done = True
        if self.upstream is not None:
            self.upstream.cancel()

    # chain callbacks
    def _stage_failed(self, error: BaseException, stage: int) -> int:
        if not self.done:
            self.done = True
            self.upstream.cancel()  # type: ignore[union-attr]
            self.program.error_hooks(error, stage)
            self.downstream.on_error(error)
        return 0

    def _take_done(self) -> None:
        if not self.done:
            self.done = True
            self.upstream.cancel()  # type: ignore[union-attr]
            self.downstream.on_complete()


class FusedFlowable(Flowable[Any]):
    """A chain of synchronous stages over a source Flowable, compiled once into one function."""

    def __init__(self, source: Flowable[Any], stages: tuple[Stage, ...]) -> None:
        self.kind = stages[-1].kind
        super().__init__(name=stages[-1].name, upstreams=(source,))
        self.index = source.index + len(stages)
        self.source = source
        self.stages = stages
        self._program: Program | None = None

    @property
    def program(self) -> Program:
        if self._program is None:
            self._program = Program(self.stages)
        return self._program

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        program = self.program
        if isinstance(self.source, SyncSource):
            _subscribe_iterable(self.source.iterable, subscriber, program)
        elif program.take_count == 0:
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_complete()
        else:
            self.source._subscribe(FusedSubscriber(subscriber, program))


def fuse(source: Flowable[Any], kind: str, name: str | None, fn: Callable[..., Any] | None = None,
         arg: Any = None, on_error: Callable[[BaseException], Any] | None = None,
         on_complete: Callable[[], Any] | None = None) -> Flowable[Any]:
    """Append a synchronous stage to ``source``, extending its fused chain when it has one."""
    if isinstance(source, FusedFlowable) and source.stages[-1].kind != "take":
        base, stages, index = source.source, source.stages, source.index + 1
    else:
        base, stages, index = source, (), source.index + 1
    stage = Stage(kind, name or f"{kind}_{index}", fn, arg, on_error, on_complete)
    return FusedFlowable(base, (*stages, stage))
