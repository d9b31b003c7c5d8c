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
import linecache
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ._demand import EMPTY_SUBSCRIPTION, DrainSubscription, log
from ._link import LINK_SLOTS, UpstreamLink
from ._protocol import UNBOUNDED, Subscriber, Subscription
from ._stage_logic import NOTHING
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


#: numbers the compiled chains, so each has its own file name in ``linecache``
_compiled = itertools.count()


def _where(stage: Stage) -> str:
    """A comment naming the stage and where its user function is defined (``file:line``), shown
    on the generated line in a traceback."""
    code = getattr(stage.fn, "__code__", None)
    place = f"{code.co_filename}:{code.co_firstlineno}" if code is not None else repr(stage.fn)
    return f"  # {stage.kind} {stage.name!r}: {place}"


def _register_source(program: Program, filename: str, source: str) -> None:
    """Put the generated source in ``linecache`` (mtime None: ``checkcache`` keeps it), so a
    traceback through the fused chain shows its line and the user function it calls; the entry
    goes when the compiled chain is collected."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    weakref.finalize(program, linecache.cache.pop, filename, None)


def _source_none_error() -> TypeError:
    return TypeError("the source iterable yielded None; items are never None (Reactive Streams §2.13)")


def _none_error(stage: Stage) -> TypeError:
    return TypeError(f"{stage.kind} stage {stage.name!r} produced None; items are never None "
                     f"(Reactive Streams §2.13)")


#: ``(on_next, run, run_items, run_into)`` of one subscription to a compiled chain (see
#: ``Program._compile``; ``run_into`` is None unless the chain is one-to-one)
Chain = tuple[Callable[[Any], int], Callable[..., tuple[int, bool]], Callable[..., int],
              Callable[[Any, int], None] | None]


class Program:
    """A fused chain compiled to a factory of ``on_next(item) -> 0 | 1`` functions."""

    __slots__ = ("stages", "_factory", "take_count", "has_hooks", "one_to_one", "__weakref__")

    def __init__(self, stages: tuple[Stage, ...]) -> None:
        self.stages = stages
        last = stages[-1] if stages else None
        self.take_count: int | None = last.arg if last is not None and last.kind == "take" else None
        self.has_hooks = any(s.kind == "tap" and (s.on_error or s.on_complete) for s in stages)
        #: every item taken in leaves as one item (map, scan, take, a tap without ``on_next``):
        #: no stage drops items, and none runs a user side effect besides transforming
        self.one_to_one = all(s.kind in ("map", "scan", "take") or (s.kind == "tap" and s.fn is None)
                              for s in stages)
        self._factory = self._compile()

    def _compile(self) -> Callable[..., Chain]:
        """Generate ``factory(down, fail, finish, none_error, *stage_args) -> (on_next, run,
        run_items)``.

        ``on_next(x) -> 1 | 0`` runs one item through the chain (subscriber mode). ``run(sub, it,
        r) -> (delivered, exhausted)`` is a whole source-drain pass with the stage bodies inlined
        in the loop (source fusion: no call per item besides the user functions and ``down``):
        it stops after ``r`` deliveries, when ``sub.cancelled`` turns true, or at exhaustion.
        ``run_items(sub, it, r) -> delivered`` is the same loop over items an upstream stage
        queued (a run handed over at an async boundary, subscriber mode): it stops on the same
        three conditions and leaves the rest in ``it``. ``run_into(it, r)`` (only for a
        :attr:`one_to_one` chain, else None) is ``run`` for a ``down`` that is a run sink's
        ``list.append``: it takes at most ``r`` items from ``it``, and the caller counts what it
        appended. All of them share the per-subscription state (scan accumulators, take counter).
        """
        params = ["down", "fail", "finish", "none_error"]
        state: list[str] = []
        inits: list[str] = []
        last = len(self.stages) - 1
        for k, stage in enumerate(self.stages):
            params.append(f"f{k}")
            if stage.kind in ("scan", "skip", "take"):
                params.append(f"a{k}")
            if stage.kind == "scan":
                state.append(f"acc{k}")
                inits.append(f"    acc{k} = a{k}")
            elif stage.kind in ("skip", "take"):
                state.append(f"c{k}")
                inits.append(f"    c{k} = 0")
            elif stage.kind not in ("map", "filter", "tap"):  # pragma: no cover - factories guard it
                raise ValueError(f"unknown stage kind {stage.kind!r}")
            assert stage.kind != "take" or k == last, "take ends a fused chain"

        def body(drop: str, fail: Callable[[int, str], list[str]], deliver: list[str],
                 deliver_last: list[str]) -> list[str]:
            lines: list[str] = []
            for k, stage in enumerate(self.stages):
                catch = ["except Exception as exc:", *("    " + line for line in fail(k, "exc"))]
                none = ["if x is None:", *("    " + line for line in fail(k, f"none_error({k})"))]
                where = _where(stage)
                if stage.kind == "map":
                    lines += ["try:", f"    x = f{k}(x){where}", *catch, *none]
                elif stage.kind == "filter":
                    lines += ["try:", f"    if not f{k}(x):{where}", f"        {drop}", *catch]
                elif stage.kind == "tap" and stage.fn is not None:
                    lines += ["try:", f"    f{k}(x){where}", *catch]
                elif stage.kind == "scan" and stage.arg is NOTHING:
                    # reactivex's scan without a seed: the first item is the first accumulation
                    lines += [f"if acc{k} is NOTHING:", f"    acc{k} = x", "else:",
                              *("    " + line for line in ["try:", f"    x = acc{k} = f{k}(acc{k}, x){where}",
                                                           *catch, *none])]
                elif stage.kind == "scan":
                    lines += ["try:", f"    x = acc{k} = f{k}(acc{k}, x){where}", *catch, *none]
                elif stage.kind == "skip":
                    lines += [f"if c{k} < a{k}:", f"    c{k} += 1", f"    {drop}"]
                elif stage.kind == "take":
                    lines += [f"c{k} += 1", f"if c{k} >= a{k}:", *("    " + line for line in deliver_last)]
            return lines + deliver

        declare = [f"nonlocal {', '.join(state)}"] if state else []
        on_next = body("return 0", lambda k, err: [f"return fail({err}, {k})"],
                       ["down(x)", "return 1"], ["down(x)", "finish()", "return 1"])
        run = ["if x is None:", "    fail(none_error(-1), -1)", "    return e, False"] + body(
                   "continue", lambda k, err: [f"fail({err}, {k})", "return e, False"],
                   ["down(x)", "e += 1", "if e == r or sub.cancelled:", "    return e, False"],
                   ["down(x)", "finish()", "return e + 1, False"])
        # Items already inside the graph are never None (the stage that made them checked), so a
        # run over queued items skips the source's None check.
        run_items = body("continue", lambda k, err: [f"fail({err}, {k})", "return e"],
                         ["down(x)", "e += 1", "if e == r or sub.cancelled:", "    return e"],
                         ["down(x)", "finish()", "return e + 1"])
        lines = [f"def factory({', '.join(params)}):", *inits,
                 "    def on_next(x):", *("        " + line for line in declare + on_next),
                 "    def run(sub, it, r):", *("        " + line for line in declare),
                 "        e = 0", "        for x in it:", *("            " + line for line in run),
                 "        return e, True",
                 "    def run_items(sub, it, r):", *("        " + line for line in declare),
                 "        e = 0", "        for x in it:", *("            " + line for line in run_items),
                 "        return e"]
        if self.one_to_one:
            # Into a run sink, `down` is a list's append: no subscriber code runs per item, so
            # nothing but a stage's own failure (or take's end) can stop the run before `r`
            # items, and islice bounds it without a per-item counter or `cancelled` check.
            run_into = ["if x is None:", "    fail(none_error(-1), -1)", "    return"] + body(
                "continue", lambda k, err: [f"fail({err}, {k})", "return"],
                ["down(x)"], ["down(x)", "finish()", "return"])
            lines += ["    def run_into(it, r):", *("        " + line for line in declare),
                      "        for x in islice(it, r):", *("            " + line for line in run_into),
                      "    return on_next, run, run_items, run_into"]
        else:
            lines += ["    return on_next, run, run_items, None"]
        namespace: dict[str, Any] = {"islice": itertools.islice, "NOTHING": NOTHING}
        source = "\n".join(lines) + "\n"
        filename = f"<rxpipe fused {'→'.join(s.name for s in self.stages)} #{next(_compiled)}>"
        exec(compile(source, filename, "exec"), namespace)
        _register_source(self, filename, source)
        return namespace["factory"]  # type: ignore[no-any-return]

    def instantiate(self, down: Callable[[Any], Any], fail: Callable[[BaseException, int], int],
                    finish: Callable[[], None]) -> Chain:
        """Fresh per-subscription functions ``(on_next, run, run_items, run_into)`` (see
        :meth:`_compile`)."""
        args: list[Any] = []
        stages = self.stages
        for stage in stages:
            args.append(stage.fn)
            if stage.kind in ("scan", "skip", "take"):
                args.append(stage.arg)
        return self._factory(down, fail, finish,
                             lambda k: _none_error(stages[k]) if k >= 0 else _source_none_error(), *args)

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

    __slots__ = ("iterator", "source_iterator", "program", "run", "sink", "run_into", "end_run")

    def __init__(self, downstream: Subscriber[Any], iterator: Iterator[Any],
                 program: Program | None) -> None:
        super().__init__(downstream)
        self.iterator = iterator
        #: the iterator made by iter(); closed on cancel (self.iterator may wrap a peeked item)
        self.source_iterator = iterator
        self.program = program
        self.run: Callable[..., tuple[int, bool]] | None = None
        #: with a downstream that takes runs (``run_sink``): the list a pass appends to, the
        #: chain's one-to-one pass into it (or None), and the downstream's end-of-run signal
        self.sink: list[Any] | None = None
        self.run_into: Callable[[Any, int], None] | None = None
        self.end_run: Callable[[int], None] | None = None
        if program is not None:
            down: Callable[[Any], Any] = downstream.on_next
            # A downstream boundary that takes runs (a backpressured buffer): the chain appends
            # each item to its queue and the whole run is signalled once, after the pass. The
            # pass never appends beyond `requested` (exactly the boundary's outstanding demand).
            run_sink = getattr(downstream, "run_sink", None)
            if run_sink is not None:
                self.sink, self.end_run = run_sink()
                down = self.sink.append
            _, self.run, _, run_into = program.instantiate(down, self._stage_failed, self._take_done)
            if run_sink is not None:
                self.run_into = run_into

    def start(self) -> None:
        """After ``on_subscribe``: complete at once if the iterable is known to be empty."""
        if not self.cancelled and self.requested == 0 and _known_exhausted(self.iterator):
            self._complete()

    def _drain(self) -> None:
        r = self.requested
        if r == 0:
            return
        e = 0
        run = self.run
        try:
            # Invariant: e items delivered in this pass, e <= r. The `cancelled` check after
            # each delivery makes a cancel from inside on_next stop the source at once (§3.7).
            if run is None:
                on_next = self.downstream.on_next
                for x in self.iterator:
                    if x is None:
                        self.emitted += e
                        self._error(_source_none_error())
                        return
                    on_next(x)
                    e += 1
                    if e == r or self.cancelled:
                        break
                else:
                    self.emitted += e
                    self._complete()
                    return
            else:
                run_into = self.run_into
                if run_into is not None:
                    # Nothing but this pass touches the sink until it returns, unless a stage
                    # failed or take ended the stream (then cancelled is set and e is moot).
                    sink = self.sink
                    assert sink is not None
                    start = len(sink)
                    run_into(self.iterator, r)
                    e = max(len(sink) - start, 0)
                    exhausted = e < r
                else:
                    e, exhausted = run(self, self.iterator, r)
                end_run = self.end_run
                if end_run is not None and e and not self.cancelled:
                    end_run(e)  # before any terminal signal: the run precedes it
                if exhausted:
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


class FusedSubscriber(UpstreamLink, Subscription):
    """A compiled chain running in subscriber mode over any Flowable (see module docstring).

    Demand passes through unchanged (no outstanding count on the hot path: the strict boundary
    or the next stage's link checks §1.1); cancel-once and the terminal flag (``upstream_done``)
    are :class:`~rxpipe.stage.UpstreamLink`'s.
    """

    __slots__ = (*LINK_SLOTS, "downstream", "program", "chain", "try_on_next", "try_on_next_run",
                 "unbounded", "forwarded")

    def __init__(self, downstream: Subscriber[Any], program: Program) -> None:
        self.downstream = downstream
        self.program = program
        self.link_upstream(None)
        self.unbounded = False
        self.forwarded = 0
        self.chain, _, run_items, _ = program.instantiate(downstream.on_next, self._stage_failed,
                                                          self._take_done)
        #: Conditional delivery for rxpipe's own queue-draining stages (Reactor's
        #: ``ConditionalSubscriber.tryOnNext``): a falsy result means the chain dropped the item,
        #: so it used no demand and no ``request(1)`` goes upstream. The chain itself, with no
        #: wrapper: those callers stop at once when this subscriber cancels them (their own
        #: per-item ``cancelled`` check), so the terminal guard of ``on_next`` is not needed.
        self.try_on_next = self.chain
        #: The same for a whole run of queued items: ``try_on_next_run(sub, it, r) -> delivered``
        #: takes items from the iterator ``it`` through the chain, stopping after ``r``
        #: deliveries, once ``sub.cancelled`` (the calling stage's flag) turns true, or when ``it``
        #: is exhausted; what it did not take stays in ``it``. One call per run instead of one
        #: per item: the stage bodies are inlined in the loop, as in source fusion.
        self.try_on_next_run = run_items

    # upstream → downstream
    def on_next(self, item: Any) -> None:
        # Invariant: one chain call per item; a dropped item asks upstream for exactly one more
        # (filter/skip, DESIGN §2), unless demand is unbounded or the chain ended the stream.
        if self.upstream_done:
            return
        if not self.chain(item) and not self.upstream_done and not self.unbounded:
            self.upstream.request(1)  # type: ignore[union-attr]

    def _upstream_finished(self, error: BaseException | None) -> None:
        if error is not None:
            self.program.error_hooks(error)
        else:
            error = self.program.complete_hooks()  # a raising on_complete hook turns it into an error
        if error is not None:
            self.downstream.on_error(error)
        else:
            self.downstream.on_complete()

    # downstream → upstream
    def request(self, n: int) -> None:
        if self.upstream_done:
            return
        take = self.program.take_count
        if type(n) is int and n > 0:
            if take is not None:
                n = min(n, take - self.forwarded)
                if n <= 0:
                    return
                self.forwarded += n
            elif n >= UNBOUNDED:
                self.unbounded = True
        self.upstream.request(n)  # type: ignore[union-attr]

    def cancel(self) -> None:
        self.cancel_upstream()

    # chain callbacks
    def _stage_failed(self, error: BaseException, stage: int) -> int:
        if not self.upstream_done:
            self.cancel_upstream()
            self.program.error_hooks(error, stage)
            self.downstream.on_error(error)
        return 0

    def _take_done(self) -> None:
        if not self.upstream_done:
            self.cancel_upstream()
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
    def passes_capabilities(self) -> bool:  # type: ignore[override]
        """map, filter, take, skip and tap pass their upstream's items (a map is taken to map a
        batch to a batch); a scan makes new ones, so a chain with one declares nothing."""
        return all(stage.kind != "scan" for stage in self.stages)

    @property
    def program(self) -> Program:
        if self._program is None:
            self._program = Program(self.stages)
        return self._program

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        program = self.program
        if program.take_count == 0:
            # before the source: take(0) neither subscribes nor requests, whatever the source
            # (a synchronous source would otherwise emit into a subscriber requesting in on_subscribe)
            subscriber.on_subscribe(EMPTY_SUBSCRIPTION)
            subscriber.on_complete()
        elif isinstance(self.source, SyncSource):
            _subscribe_iterable(self.source.iterable, subscriber, program)
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
