"""``cache(max_entries, ttl_s)``: exact-match response cache with single-flight coalescing (DESIGN §8b).

:class:`CacheSubscription` passes items through with demand passed through (``request(n)``
upstream for ``request(n)`` downstream) except the :class:`~rxpipe.engines.CompletionRequest`
items it answers itself; for each of those it asks upstream for one more.

A request is *cacheable* when it is a completion (chat or not; not embeddings, not Responses),
deterministic — ``temperature == 0`` or a ``seed`` in its sampling fields — and has a reply
slot. Its key is the exact request as the backend would be sent it: model, prompt or messages
(whole: tool calls, tool results, content parts), ``max_tokens`` and the name it came by, and
every other field (tools, response_format, logprobs, a vendor's own ..., orjson, sorted keys).
Streaming or not is not part of the key (nor ``stream_options``): a hit replays the answer
either way.

- *hit* (a fresh entry): answered here with a Completion replaying the cached answer as the
  consumer gives credit: its text one chunk per word (per token when it has log probabilities,
  each with its own), reasoning before it and each tool call after it as a chunk of its own;
  not streamed, the whole answer (tool calls, log probabilities, usage ... as the backend
  said them); ``request.cache = "hit"``.
- *coalesced* (an identical request is running): it waits for that one (Go's ``singleflight``:
  duplicates wait and share the result) and is answered like a hit; if the leader fails, its
  error. ``request.cache = "hit"``.
- *miss*: passed downstream (``request.cache = "miss"``); its result is stored when it finishes
  with one of OpenAI's finish reasons (``stop``, ``length``, ``tool_calls`` ...).

Memory: at most ``max_entries`` entries (least recently used evicted first), each expiring
``ttl_s`` after it was stored (loop clock); expired entries are dropped when met and when
evicting. Requests waiting on a leader are bounded by the requests in flight.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections import OrderedDict
from typing import Any

import orjson
from prometheus_client import Counter

from rxpipe._protocol import Subscriber
from rxpipe.flowable import Flowable
from rxpipe.metrics import StageStatistics
from rxpipe.stage import LINK_SLOTS, QueueDrainSubscription, UpstreamLink

from ._answers import OPENAI_FINISH_REASONS, replay_pieces
from .records import Completion, CompletionRequest, CompletionResult

__all__ = ["CacheFlowable", "ResponseCache", "cache_key", "CACHE_HITS", "CACHE_MISSES"]

CACHE_HITS = Counter("rxpipe_cache_hits", "Requests answered by the response cache (coalesced ones included).")
CACHE_MISSES = Counter("rxpipe_cache_misses", "Cacheable requests the response cache passed to the engine.")

_WORDS = re.compile(r"\s*\S+|\s+")

#: fields that say how the answer is delivered, not what it is: not part of the key
_DELIVERY = frozenset({"include_usage", "stream_options"})


def cache_key(request: CompletionRequest) -> str | None:
    """The exact-match key of a deterministic completion, or None when it is not cacheable."""
    sampling = request.sampling
    temperature = sampling.get("temperature")
    deterministic = temperature == 0 or sampling.get("seed") is not None
    if not deterministic or request.endpoint is not None:
        return None
    try:
        return orjson.dumps([request.model, request.prompt, request.messages, request.max_tokens,
                             request.max_tokens_field, {k: v for k, v in sampling.items() if k not in _DELIVERY}],
                            option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:
        return None


class ResponseCache:
    """The entries: key → (expires_at_s, result), LRU order; and the in-flight leaders."""

    def __init__(self, max_entries: int, ttl_s: float) -> None:
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.entries: OrderedDict[str, tuple[float, CompletionResult]] = OrderedDict()
        #: key → requests waiting for the running identical one
        self.waiters: dict[str, list[CompletionRequest]] = {}

    def get(self, key: str, now: float) -> CompletionResult | None:
        entry = self.entries.get(key)
        if entry is None:
            return None
        if entry[0] <= now:
            del self.entries[key]
            return None
        self.entries.move_to_end(key)
        return entry[1]

    def put(self, key: str, result: CompletionResult, now: float) -> None:
        entries = self.entries
        entries[key] = (now + self.ttl_s, result)
        entries.move_to_end(key)
        while len(entries) > self.max_entries:
            entries.popitem(last=False)


class _Replay:
    """Owner of a Completion that replays a cached result, one piece per chunk of credit."""

    def __init__(self, request: CompletionRequest, result: CompletionResult, loop: asyncio.AbstractEventLoop) -> None:
        self.result = result
        self.pieces = replay_pieces(result, _WORDS.findall(result.text))
        self.next = 0
        self.busy = False
        self.completion = Completion(request, self, loop)
        request.completion = self.completion
        if not request.stream:
            self.pieces = [(result.text, None, None)] if result.text else []
            self._push_all()

    def _push(self, piece: tuple[str, Any, Any]) -> None:
        text, delta, logprobs = piece
        if delta is None and logprobs is None:
            self.completion.push(text, 1)
        else:
            self.completion.push_delta(text, 1, delta, logprobs)

    def _push_all(self) -> None:
        for piece in self.pieces[self.next:]:
            self._push(piece)
        self.next = len(self.pieces)
        self._finish()

    def _finish(self) -> None:
        r = self.result
        now = self.completion._loop.time()
        arrival = self.completion.request.arrival_s or now
        answered = r.text or r.message
        self.completion.finish(dataclasses.replace(r, queue_time_s=now - arrival,
                                                   ttft_s=now - arrival if answered else None, e2e_s=now - arrival))

    def credit_granted(self, completion: Completion) -> None:
        if self.busy:
            return
        self.busy = True
        try:
            while completion.credit and not completion.done:
                if self.next < len(self.pieces):
                    self._push(self.pieces[self.next])
                    self.next += 1
                else:
                    self._finish()
        finally:
            self.busy = False
        if self.next >= len(self.pieces) and not completion.done:
            self._finish()

    def cancel_completion(self, completion: Completion) -> None:
        now = completion._loop.time()
        completion.finish(CompletionResult("", "cancelled", self.result.prompt_tokens, 0, 0.0, None,
                                           now - (completion.request.arrival_s or now)))


class CacheSubscription(QueueDrainSubscription, UpstreamLink):
    __slots__ = (*LINK_SLOTS, "store", "loop", "received")

    def __init__(self, downstream: Subscriber[Any], store: ResponseCache, name: str) -> None:
        super().__init__(downstream)
        self.store = store
        self.loop: asyncio.AbstractEventLoop | None = None
        self.received = 0
        self.link_upstream(name)

    def _upstream_ready(self) -> None:
        r = self.requested - len(self.queue)
        if r > 0:
            self.request_upstream(r)

    def _on_request(self, n: int) -> None:
        self.request_upstream(n)

    def on_next(self, item: Any) -> None:
        if not self.accept(item):
            return
        self.counters.items_in += 1
        if isinstance(item, CompletionRequest) and item.reply is not None and self._answered(item):
            self.request_upstream(1)  # consumed here: the demand it used is asked for again
            return
        self.queue.append(item)
        self.drain()

    def _on_delivered(self, count: int) -> None:
        self.counters.items_out += count

    def _answered(self, request: CompletionRequest) -> bool:
        key = cache_key(request)
        if key is None:
            return False
        store = self.store
        loop = self.loop
        if loop is None:
            loop = self.loop = asyncio.get_running_loop()
        now = loop.time()
        if request.arrival_s is None:
            request.arrival_s = now
        result = store.get(key, now)
        if result is not None:
            self._hit(request, result)
            return True
        waiters = store.waiters.get(key)
        if waiters is not None:
            waiters.append(request)
            request.cache = "hit"
            CACHE_HITS.inc()
            return True
        store.waiters[key] = []
        request.cache = "miss"
        CACHE_MISSES.inc()
        reply = request.reply
        assert reply is not None
        reply.add_done_callback(lambda f: self._admitted(key, f))
        return False

    def _hit(self, request: CompletionRequest, result: CompletionResult) -> None:
        request.cache = "hit"
        CACHE_HITS.inc()
        reply = request.reply
        if reply is not None and not reply.done():
            reply.set_result(_Replay(request, result, reply.get_loop()).completion)

    def _admitted(self, key: str, reply: asyncio.Future[Completion]) -> None:
        if reply.cancelled() or reply.exception() is not None:
            self._release_waiters(key, None, reply.exception() if not reply.cancelled() else None)
            return
        reply.result().result.add_done_callback(lambda f: self._finished(key, f))

    def _finished(self, key: str, future: asyncio.Future[CompletionResult]) -> None:
        if future.cancelled():
            self._release_waiters(key, None, None)
            return
        error = future.exception()
        if error is not None:
            self._release_waiters(key, None, error)
            return
        result = future.result()
        if result.finish_reason in OPENAI_FINISH_REASONS:
            self.store.put(key, result, future.get_loop().time())
            self._release_waiters(key, result, None)
        else:
            self._release_waiters(key, None, None)

    def _release_waiters(self, key: str, result: CompletionResult | None, error: BaseException | None) -> None:
        waiters = self.store.waiters.pop(key, [])
        for request in waiters:
            reply = request.reply
            if reply is None or reply.done():
                continue
            if result is not None:
                reply.set_result(_Replay(request, result, reply.get_loop()).completion)
            elif error is not None:
                reply.set_exception(error)
            else:  # the leader was cancelled or ended early: nothing to share
                request.on_discard("cache_leader_cancelled")

    def _release(self) -> None:
        self.cancel_upstream()
        self.queue.clear()

    def statistics(self) -> StageStatistics:
        counters = self.counters
        return StageStatistics(counters.stage, self.requested, len(self.queue), None, counters.items_in,
                               counters.items_out, dict(counters.dropped))


class CacheFlowable(Flowable[Any]):
    kind = "cache"
    passes_capabilities = True

    def __init__(self, source: Flowable[Any], max_entries: int, ttl_s: float, name: str | None) -> None:
        super().__init__(name=name, upstreams=(source,))
        self.source = source
        #: shared by every subscription of this stage (one cache per graph node)
        self.store = ResponseCache(max_entries, ttl_s)

    def _subscribe(self, subscriber: Subscriber[Any]) -> None:
        self.source._subscribe(CacheSubscription(subscriber, self.store, self.name))
