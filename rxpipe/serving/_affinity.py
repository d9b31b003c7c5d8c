"""``prefix_affinity``: which prompt prefixes a balance sent to which branch (DESIGN §8b).

An approximate, router-side index of the replicas' prefix caches, as SGLang's cache-aware router
keeps a radix tree per worker and the Gateway API inference extension an approximate prefix
scorer: built only from the router's own routing history (no replica reports its cache), bounded
per branch by an LRU of ``max_blocks`` blocks, as a replica's cache is.

A prompt is cut into blocks of ``block_chars`` characters; block ``i`` is named by the hash of
its text and of block ``i - 1``'s name, so a name stands for the whole prefix up to it. A branch
*matches* a prompt for as many leading blocks as its index holds. The choice, among the branches
that have demand (the balance never gives an item to one without):

1. the best demand ``best`` is the largest among them;
2. a branch whose demand lags it — ``best - demand > balance_abs`` and ``best > balance_rel ×
   demand`` (SGLang's ``balance_abs_threshold`` / ``balance_rel_threshold``, on exact demand
   instead of polled load) — is passed over, so a hot prefix does not pile onto one replica
   while others idle;
3. of the others, the longest match wins when it covers at least ``min_match`` of the prompt's
   blocks (SGLang's ``cache_threshold``); ties go to the most demand, then round-robin;
4. otherwise (no such match) the most demand wins, as without affinity.

The prompt's blocks are then recorded for the chosen branch (most recently used).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ._blocks import block_chain
from .records import CompletionRequest

__all__ = ["PrefixAffinity", "RoutingPolicy", "request_text"]


class RoutingPolicy(Protocol):
    """What ``balance(affinity=)`` calls: ``bind(branches)`` once per stage, then
    ``choose(item, candidates) -> branch`` per item, ``candidates`` being the ``(branch,
    demand)`` pairs of the branches that may take it (demand > 0), in round-robin order."""

    def bind(self, branches: int) -> None: ...

    def choose(self, item: Any, candidates: Sequence[tuple[int, int]]) -> int: ...


def request_text(item: Any) -> str | None:
    """The text a request's prefix is taken from: a CompletionRequest's ``prompt``, or its chat
    messages as ``role:content`` joined by newlines; a ``str`` item itself; None otherwise (no
    affinity for that item)."""
    if isinstance(item, CompletionRequest):
        if item.prompt is not None:
            return item.prompt
        if item.messages:
            return "\n".join(f"{m.get('role')}:{m.get('content')}" for m in item.messages if isinstance(m, dict))
        return None
    return item if isinstance(item, str) else None


class PrefixAffinity:
    """The policy object of ``ops.prefix_affinity`` (see the module docstring). One per balance
    stage: ``bind(n)`` sizes it for ``n`` branches; ``choose`` picks among candidates and
    records the choice. ``blocks(k)`` is branch ``k``'s index size (blocks); ``routed_by_match``
    counts items sent by a match, ``routed_by_demand`` the others."""

    def __init__(self, block_chars: int, max_blocks: int, balance_abs: int, balance_rel: float, min_match: float,
                 text: Callable[[Any], str | None]) -> None:
        self.block_chars = block_chars
        self.max_blocks = max_blocks
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.min_match = min_match
        self.text = text
        self.index: list[OrderedDict[int, None]] = []
        self.routed_by_match = 0
        self.routed_by_demand = 0

    def bind(self, branches: int) -> None:
        """Size the index for ``branches`` branches (ValueError when bound to another count)."""
        if self.index and len(self.index) != branches:
            raise ValueError(f"this prefix_affinity serves a balance of {len(self.index)} branches, not {branches}: "
                             "make one per balance")
        if not self.index:
            self.index = [OrderedDict() for _ in range(branches)]

    def blocks(self, k: int) -> int:
        return len(self.index[k])

    def chain(self, text: str) -> list[int]:
        """The names of the prompt's full blocks, as the engines' prefix cache names them."""
        return block_chain(text, self.block_chars)

    def choose(self, item: Any, candidates: Sequence[tuple[int, int]]) -> int:
        """Branch for ``item`` among ``candidates`` — ``(branch, demand)`` pairs with demand > 0,
        in round-robin order — and record it. Returns the branch number."""
        text = self.text(item)
        names = self.chain(text) if text else []
        best_demand = max(d for _, d in candidates)
        chosen = -1
        if names:
            need = max(1, math.ceil(self.min_match * len(names) - 1e-9))  # blocks; 1e-9: float noise
            abs_lag, rel = self.balance_abs, self.balance_rel
            longest = 0
            chosen_demand = 0
            for k, demand in candidates:
                if best_demand - demand > abs_lag and best_demand > rel * demand:
                    continue  # lags too far behind the least loaded: not worth the cache hit
                index = self.index[k]
                match = 0
                for name in names:
                    if name not in index:
                        break
                    match += 1
                if match >= need and (match > longest or (match == longest and demand > chosen_demand)):
                    chosen, longest, chosen_demand = k, match, demand
        if chosen < 0:
            self.routed_by_demand += 1
            for k, demand in candidates:
                if demand == best_demand:
                    chosen = k
                    break
        else:
            self.routed_by_match += 1
        if names:
            self.record(chosen, names)
        return chosen

    def record(self, k: int, names: list[int]) -> None:
        """Branch ``k`` was sent a prompt of these blocks: most recently used now; the least
        recently used beyond ``max_blocks`` are forgotten."""
        index = self.index[k]
        for name in reversed(names):  # the head most recent: a prefix is forgotten from its tail
            if name in index:
                index.move_to_end(name)
            else:
                index[name] = None
        over = len(index) - self.max_blocks
        for _ in range(over):
            index.popitem(last=False)
