"""The serving stages' factories (DESIGN §4, §5, §8b): the executor, the tenants' queue, the
replicas' balance with its prefix affinity, and the response cache.

Their manual is here; ``rxpipe.serving`` and ``rxpipe.operators`` export the same objects
(``ops.execute is rxpipe.serving.execute``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any

from ..flowable import Operator
from ..settings import check_int, check_number

if TYPE_CHECKING:
    from ._affinity import PrefixAffinity, RoutingPolicy
    from .engine import Engine

__all__ = ["execute", "fair_queue", "balance", "prefix_affinity", "cache"]


def _check_int(op: str, arg: str, value: object, minimum: int) -> None:
    check_int(value, f"{op}({arg})", minimum=minimum)


def _check_positive(op: str, arg: str, value: object) -> None:
    check_number(value, f"{op}({arg})", minimum=0, exclusive_minimum=True)


def _check_callable(op: str, fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"{op}() needs a callable, got {fn!r}")


def execute(engine: Engine, *, name: str | None = None) -> Operator:
    """The executor node: submit each ``CompletionRequest`` to ``engine``; emit its ``Completion``.

        engine:  max_num_seqs=2                    A, B, C: CompletionRequest; a, b, c: Completion
        demand:  ^2           ^1      ^1           free = max_num_seqs - running - waiting
        source:  -A-B-------------C-------D-|
        output:  -a-b-------------c-------d-|      emitted on admission (also set on request.reply)
        engine:   [a,b] running  a done  b done

    This is where backpressure is born: the stage asks upstream for work only when the engine
    can run it. Demand: free = ``max_num_seqs - running - waiting``; an unbatched upstream gets
    exactly ``free`` (never more: requested-but-not-arrived + running + waiting <= max_num_seqs);
    a batched upstream (``ops.batch``, items are lists of requests) gets one batch only when
    ``free >= max_size`` (as many whole batches as fit). It requests again whenever the engine
    frees a slot (its capacity listener), so demand follows the engine step by step.
    Downstream is normally an UNBOUNDED sink; the stage holds at most ``max_num_seqs``
    undelivered Completions and stops asking upstream while it does.
    Cancellation: a request cancelled before admission (``request.cancel()``: client gone) is
    dropped on arrival, never submitted, and replaced by one more from upstream (counted,
    reason ``"cancelled"``). Cancelling a Completion's token stream frees its slot within one
    engine step (the engine's job). A request past its ``deadline_s`` is answered with a
    Completion already finished with reason ``"deadline"`` (it never runs).
    Engine down (``engine.available`` False): a request with a ``reply`` slot gets
    ``EngineUnavailableError`` on it at once (the gateway answers 503) and is replaced by one
    more; one without a reply slot is held (bounded by ``max_num_seqs``) and demand pauses
    until the engine is back.
    Signals: TypeError (raised here) if ``engine`` is not an :class:`~rxpipe.serving.Engine`; an item
    that is not a ``CompletionRequest`` (or a list of them) cancels upstream and signals
    TypeError; an upstream emitting beyond demand signals ``MissingBackpressureError``. An
    upstream error is set on the replies of requests not yet admitted and signalled after the
    admitted Completions. Downstream cancel cancels upstream and fails the replies of held
    requests with ``EngineUnavailableError``; admitted Completions keep running.
    Anchor: vLLM's scheduler (``max_num_seqs``, continuous batching); Triton's dynamic batcher;
    Reactive Streams §3 demand.
    """
    from ._execute import ExecuteFlowable
    from .engine import Engine

    if not isinstance(engine, Engine):
        raise TypeError(f"execute() needs an rxpipe.serving.Engine, got {engine!r}")
    return lambda source: ExecuteFlowable(source, engine, name)


def fair_queue(capacity: int, *, tenant: Callable[[Any], Hashable] | None = None,
               weight: Mapping[Hashable, float] | None = None, cost: Callable[[Any], float] | None = None,
               priority: Callable[[Any], int] | None = None,
               departure: Callable[[Any, Callable[[Any], None]], bool] | None = None,
               name: str | None = None) -> Operator:
    """A bounded queue shared fairly by tenants: strict priority bands, weighted shares of the
    queue, and the Virtual Token Counter's service order within a band.

        capacity=16, weight={"a": 1, "b": 1}, cost: 3 tokens per a item, 1 per b item
        source:  -a1-a2-b1-b2-b3-b4-b5-b6-|
        demand:  ----------------------------^8
        output:  ----------------------------a1-b1-b2-b3-a2-b4-b5-b6|
                 (counters after each: a 3; b 1, 2, 3; tie at 3 → a, activated first: a 6; b 4, 5, 6)

    Service order: the highest ``priority(item)`` band that holds items is served first, always
    (strict bands, as the Kubernetes inference gateway's flow control). Within a band, flows are
    keyed by tenant and served lowest Virtual Token Counter first (Sheng et al., "Fairness in
    Serving Large Language Models", OSDI 2024, weighted VTC): dispatching an item adds
    ``cost(item) / weight[tenant]`` to its tenant's counter; ties go to the flow that became
    active first. A tenant whose flow becomes active (had nothing queued) is lifted to the
    minimum counter of the band's active tenants (or, in an idle band, to the counter of the
    last one that left), so idle time earns no credit. ``cost`` is an estimate charged at
    dispatch (for LLM requests: prompt tokens + 2 × max or expected output tokens); the real
    count corrects it at completion through the hook ``reconcile(item, actual_cost)`` on the
    stage's subscription. Bound (the paper's, in this stage's terms): while two tenants of one
    band both have items queued, the weighted service they get between any two instants —
    the sum of ``cost / weight`` of their dispatched items — differs by at most 2 × the largest
    ``cost / weight`` of one item (before reconciliation).

    Shares: a tenant named in ``weight`` owns ``floor(capacity × w / Σw)`` places of the queue.
    An item is kept iff its tenant holds fewer than its share, or the shared pool (capacity minus
    the items held and minus every tenant's *unused* share) has a place. So a tenant within its
    weighted share is never refused because another tenant filled the queue, and the queue never
    holds more than ``capacity`` items. Tenants not in ``weight`` have weight 1 and share 0 (only
    the pool). With ``weight=None`` there are no shares: a bounded VTC queue.

    Demand and the admission extension. Toward downstream it is an ordinary queue stage: it
    emits only what was requested. Toward upstream it requests ``capacity`` at subscribe, then
    exactly one more per item that left it (dispatched downstream, or refused on arrival as
    below) — the smooth one-per-departure rule of the HTTP edge — so held items plus outstanding
    upstream demand never exceed ``capacity``. Per-tenant admission is a small extension of that
    protocol: the subscription this stage hands upstream (the stage itself) also answers
    ``room_for(tenant) -> bool`` (there is outstanding demand *and* an item for that tenant would
    be kept) and ``demand_for(tenant) -> int`` (how many in a row would be kept, <= the
    outstanding demand). Both are synchronous questions on the loop thread whose answers hold
    until the next signal, so "ask, then ``on_next``" is atomic. They refine ``request(n)``, never
    replace it: §1.1 still holds (an upstream may emit at most what was requested in total,
    whatever it asked), and an upstream that does not know the extension just sees ordinary
    ``request(n)`` demand. An item emitted within demand for a tenant without room is not a
    protocol violation, so it is not answered with ``MissingBackpressureError``; keeping it
    would take another tenant's reserved place, so it is shed with a tell —
    ``on_discard("tenant_full")`` on the item (a ``CompletionRequest``'s client gets its answer),
    counted as dropped with reason ``tenant_full`` — and its unit of demand is requested again.
    An upstream that asks ``room_for`` first never has an item shed.

    Departure (the exact bound at an HTTP edge). By default an item departs — frees its place
    and its tenant's share, and lets one more in upstream — when it is dispatched downstream.
    With ``departure``, the stage calls ``departure(item, callback)`` for each item it keeps; if
    that returns True the item departs only when ``callback(item)`` is called (once), and until
    then it still counts against the capacity and its tenant's share, wherever it waits
    downstream. The gateway passes :func:`rxpipe.gateway.reply_departure`, which calls back when
    the request starts on the engine (or fails, or its client leaves), so admitted and not
    running requests never exceed ``capacity``, counting what ``batch`` holds — the bound
    :func:`rxpipe.gateway.edge_queue` keeps for one tenant. A callback for an item still queued
    (its client left) withdraws it (no VTC charge; counted as dropped, reason ``cancelled``).

    Args: capacity (items, int >= 1); tenant (item -> hashable tenant; default: one tenant);
        weight (tenant -> weight > 0, e.g. ``Tenants.weights``); cost (item -> tokens >= 0,
        default 1 per item); priority (item -> int, higher served first; default 0);
        departure ((item, callback) -> bool, see above; default: departs when dispatched).
        ``tenant``, ``priority`` and ``cost`` must be pure (``reconcile`` calls them again) and
        tenants should come from a bounded set (one flow per tenant and band is kept).
    Signals: ValueError/TypeError (raised here) for a bad capacity, weight or non-callable. A
        raising ``tenant``/``priority``/``cost``, a negative or non-number cost or a non-int
        priority cancels upstream, tells the held items and the item ``on_discard("error")`` and
        signals the exception. An upstream emitting beyond what was requested signals
        ``MissingBackpressureError`` the same way. An upstream error or completion is signalled
        after the held items. Cancel travels upstream and frees the queue.
    Anchor: Sheng et al., OSDI 2024 (VTC); llm-d / Gateway API Inference Extension flow control
        (flows keyed by tenant and priority, strict bands); buffer sharing with guaranteed
        minimums (static partitioning plus a shared pool) in switch buffer management.
    """
    from ._fair_queue import FairQueueFlowable

    _check_int("fair_queue", "capacity", capacity, 1)
    for arg, fn in (("tenant", tenant), ("cost", cost), ("priority", priority), ("departure", departure)):
        if fn is not None and not callable(fn):
            raise TypeError(f"fair_queue({arg}=) needs a callable, got {fn!r}")
    if weight is not None:
        if not isinstance(weight, Mapping):
            raise TypeError(f"fair_queue(weight=) needs a mapping tenant -> weight, got {weight!r}")
        for key, w in weight.items():
            _check_positive("fair_queue", f"weight[{key!r}]", w)
    return lambda source: FairQueueFlowable(source, capacity, tenant, weight, cost, priority, name, departure)


def balance(*branches: Operator, retry_unstarted: bool = True, retry_started: bool = False,
            affinity: RoutingPolicy | None = None, name: str | None = None) -> Operator:
    """Send each item to one branch that has demand, the one with the most first; merge the outputs.

        source:  -a-b-c-d-|
        x:       ^3                       branch x asked for 3 (say, an executor with 3 free slots)
        y:       ^1
        upstream: ^4                      the sum of the branches' demand
        x gets:  -a-b---d-|               the most demand first; equal demand: round-robin
        y gets:  -----c---|

    ``source.pipe(ops.balance(ops.execute(e1), ops.execute(e2)))``: a branch is an operator
    applied to the balance's port for it; its output is merged into the stage's output (merge's
    fairness and prefetch). With one ``execute(engine)`` per replica, each replica's free slots
    are its demand, so work goes to the least-loaded replica by construction.
    Demand: an item goes only to a branch that asked for it and was not given it yet, so a branch
    never receives more than it asked. Upstream has been asked for at most the sum of the eligible
    branches' demand minus the items the stage holds. A branch whose engine (an ``execute`` stage
    in it) is not ``available`` — down, circuit open — is not eligible: it has no demand.
    Failover (``retry_unstarted``, default True; for ``CompletionRequest`` items with a reply
    slot and more than one branch): a request failed by its engine (``EngineError``) before its
    first token reached the client (a stream with no token relayed; any non-streamed request) is
    sent again, ahead of the items held, to a branch it has not tried; once it streamed a token
    its client gets the error (an error event), never a duplicate — unless ``retry_started``.
    Mid-stream failover (``retry_started``, default False): a streamed request whose engine
    failed it after tokens reached the client is continued on a branch it has not tried, as a
    new request of the prompt plus the text already sent (chat: the messages plus a final
    ``assistant`` message holding that text, which the backend continues) and ``max_tokens``
    less the tokens sent; the client's stream goes on where it stopped — no repeated and no
    missing text, one end, and a result whose ``completion_tokens`` and text are the whole
    answer's (its ``prompt_tokens``, queue time and time to first token the first attempt's).
    The client's Completion is a relay of the current attempt's; the stage's output carries the
    attempts' own Completions.
    Affinity (``affinity=ops.prefix_affinity(...)``): among the branches with demand, the one
    that was sent the longest prefix of the request's prompt, unless its demand lags the best
    one's by more than the affinity's threshold (see :func:`prefix_affinity`). Affinity never
    sends an item to a branch without demand. Any object with ``bind(branches)`` and
    ``choose(item, candidates) -> branch`` is such a routing policy: ``candidates`` are the
    ``(branch, demand)`` pairs of the eligible branches, in round-robin order from the branch
    after the last one served (so ``candidates[0][0]`` is round-robin among those with demand).
    The stage's ``engine`` is a view of the replicas: available while any one is.
    Signals: TypeError (raised here) without branches or for a branch that is not callable, and
    for a branch returning no Flowable. An upstream error reaches every branch at once (the items
    held are dropped and told ``on_discard("error")``); completion reaches a branch once the held
    items went out. The merged output follows ``merge``: the first branch error cancels the
    others (and so upstream). Cancelling downstream cancels every branch; the last branch gone
    cancels upstream. An upstream emitting beyond demand signals ``MissingBackpressureError``.
    Anchor: Akka Streams ``Balance`` ("each upstream element is emitted to the first available
    downstream consumer"), with DESIGN §8b's choice among those available: the most demand.
    """
    from ._balance import BalanceFlowable

    if not branches:
        raise TypeError("balance() needs at least one branch operator")
    for branch in branches:
        _check_callable("balance", branch)
    if affinity is not None:
        if not (callable(getattr(affinity, "choose", None)) and callable(getattr(affinity, "bind", None))):
            raise TypeError(f"balance(affinity=) needs ops.prefix_affinity(...) or another routing policy "
                            f"(bind(branches), choose(item, candidates) -> branch), got {affinity!r}")
        affinity.bind(len(branches))
    return lambda source: BalanceFlowable(source, branches, retry_unstarted, name, retry_started, affinity)


def prefix_affinity(block_chars: int = 64, max_blocks: int = 16384, *, balance_abs: int = 8,
                    balance_rel: float = 1.5, min_match: float = 0.3,
                    text: Callable[[Any], str | None] | None = None) -> PrefixAffinity:
    """Prefix-cache affinity for ``balance(..., affinity=)``: requests sharing a prompt prefix go
    to the branch that was sent it, whose replica likely holds it in its prefix cache.

        branches:  x demand 4, y demand 4
        source:    -A1-B1-A2-B2-A3-|     A*, B*: prompts with the shared prefixes A and B
        x gets:    -A1----A2----A3-|     A1 to x (most demand, round-robin), then A follows A
        y gets:    ----B1----B2----|

    The index: per branch, the prompt prefixes it was sent, as chains of blocks of
    ``block_chars`` characters (each block named by a hash of its text and of the block before),
    an LRU of at most ``max_blocks`` blocks per branch, built from the balance's own routing
    history (an approximation of each replica's cache, as SGLang's cache-aware router and the
    Gateway API inference extension's approximate prefix scorer keep; no replica reports).
    Choice among the branches with demand (never one without: affinity does not override "no
    demand, no work"): a branch whose demand lags the most demand by more than ``balance_abs``
    and by a factor over ``balance_rel`` is passed over (SGLang's ``balance_abs_threshold`` /
    ``balance_rel_threshold``, here on exact demand: a hot prefix does not pile onto one replica
    while others idle); of the rest, the one matching the most leading blocks, if that covers at
    least ``min_match`` of the prompt's blocks (SGLang's ``cache_threshold``), ties to the most
    demand; else the most demand, as without affinity. The prompt's blocks are recorded for the
    chosen branch.
    Args: block_chars (characters, >= 1; 64 ≈ 16 tokens, vLLM's block); max_blocks (blocks per
        branch, >= 1); balance_abs (items of demand, >= 0); balance_rel (factor, >= 1);
        min_match (fraction of the prompt's blocks, 0-1); text (item -> str or None, the text the
        prefix is taken from; default: a CompletionRequest's prompt, or its messages as
        ``role:content`` lines; a str item itself; None: no affinity for that item).
    Memory: at most ``max_blocks`` entries per branch. One affinity per balance stage.
    Signals: ValueError (raised here) for bounds out of range; TypeError for a non-callable text.
    """
    from ._affinity import PrefixAffinity, request_text

    _check_int("prefix_affinity", "block_chars", block_chars, 1)
    _check_int("prefix_affinity", "max_blocks", max_blocks, 1)
    _check_int("prefix_affinity", "balance_abs", balance_abs, 0)
    if isinstance(balance_rel, bool) or not isinstance(balance_rel, (int, float)) or not 1 <= balance_rel < math.inf:
        raise ValueError(f"prefix_affinity(balance_rel=) needs a number >= 1, got {balance_rel!r}")
    if isinstance(min_match, bool) or not isinstance(min_match, (int, float)) or not 0 <= min_match <= 1:
        raise ValueError(f"prefix_affinity(min_match=) needs a fraction in [0, 1], got {min_match!r}")
    if text is not None:
        _check_callable("prefix_affinity", text)
    return PrefixAffinity(block_chars, max_blocks, balance_abs, float(balance_rel), float(min_match),
                          text or request_text)


def cache(max_entries: int, ttl_s: float, *, name: str | None = None) -> Operator:
    """Answer repeated deterministic requests from memory; coalesce identical ones in flight.

        source:  -a-b-a-|                 a, b: CompletionRequests; a is deterministic (temperature 0)
        output:  -a-b---|                 the second a is answered by the cache, never emitted
        upstream: ^3  ^1                  one more asked for each request answered here

    For :class:`~rxpipe.engines.CompletionRequest` items with a reply slot whose sampling says
    ``temperature`` 0 or gives a ``seed`` (the key is the exact request: model, prompt or
    messages, ``max_tokens``, sampling fields). A fresh entry answers at once (``request.cache =
    "hit"``, the edge's ``x-rxpipe-cache: hit``) with a Completion replaying the text (streamed:
    one word per chunk of credit). An identical request already running is waited for and
    shared (single-flight: 10 concurrent identical requests make one engine call; a failure of
    that call is each one's error). Otherwise the request goes on (``"miss"``) and its result is
    stored when it ends ``stop`` or ``length``. Other items pass through untouched (no header).
    Demand: passed through (``request(n)`` upstream per ``request(n)`` downstream), plus one per
    request answered here. Memory: at most ``max_entries`` results (least recently used evicted),
    each kept ``ttl_s`` seconds (loop clock). Metrics: ``rxpipe_cache_hits_total``,
    ``rxpipe_cache_misses_total``.
    Args: max_entries (entries, int >= 1); ttl_s (seconds, > 0).
    Signals: ValueError (raised here) for bad bounds; upstream errors, completion and cancel
        pass through as in ``map``.
    Anchor: Go ``golang.org/x/sync/singleflight``; an LRU with time-to-live (HTTP caches'
        freshness lifetime) keyed on the full request, as LiteLLM's exact-match cache.
    """
    from ._cache import CacheFlowable

    _check_int("cache", "max_entries", max_entries, 1)
    _check_positive("cache", "ttl_s", ttl_s)
    return lambda source: CacheFlowable(source, max_entries, ttl_s, name)
