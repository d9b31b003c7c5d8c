"""Automatic prefix caching of :class:`~rxpipe.engines.SimulatedEngine` (vLLM's, DESIGN §8b).

A prompt is a chain of blocks of ``block_tokens`` tokens (4 UTF-8 bytes a token, the estimate
used everywhere: :func:`~rxpipe.engines.estimate_tokens`); only full blocks are cached, each
named by the hash of its bytes and of the block before it, so a block is reused only behind the
same prefix. As in vLLM V1's KV cache manager:

- a sequence that starts looks its blocks up from the first one and stops at the first miss;
  the hit is capped so that at least the prompt's last token is computed (its logits are needed):
  those tokens are not prefilled, so the step time drops by ``prefill_s_per_token`` × them;
- the blocks of running sequences are *pinned* (reference counted, never evicted); a block a
  sequence computes is registered at the end of the step that completed it, so a sequence
  prefilled in the same step as another with the same prefix does not hit (vLLM neither);
- a finished sequence unpins its blocks, last block first, into an LRU of at most
  ``capacity_blocks`` unpinned blocks; over that, the least recently used is evicted (so a
  prompt's tail goes before its head, as vLLM frees them in reverse order).

Counted as vLLM exports them: ``queries`` (prompt tokens looked up) and ``hits`` (of them,
tokens found cached), plus ``evictions`` (blocks).
"""

from __future__ import annotations

from collections import OrderedDict

from ..serving._blocks import block_chain, prompt_bytes

__all__ = ["PrefixCache", "prompt_bytes", "block_chain"]


class PrefixCache:
    """Blocks cached by one engine: pinned ones (by running sequences) and an LRU of the rest.

    Args: capacity_blocks: unpinned blocks kept at most (>= 1); block_tokens: tokens a block.
    State (read it, don't change it): ``queries`` / ``hits`` (tokens), ``evictions`` (blocks),
    :attr:`pinned_blocks`, :attr:`cached_blocks` (the LRU's length).
    """

    __slots__ = ("capacity_blocks", "block_tokens", "block_bytes", "_refs", "_lru", "queries", "hits", "evictions")

    def __init__(self, capacity_blocks: int, block_tokens: int) -> None:
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        self.block_bytes = 4 * block_tokens
        self._refs: dict[int, int] = {}  # pinned block -> running sequences holding it
        self._lru: OrderedDict[int, None] = OrderedDict()  # unpinned cached blocks, oldest first
        self.queries = 0
        self.hits = 0
        self.evictions = 0

    @property
    def pinned_blocks(self) -> int:
        return len(self._refs)

    @property
    def cached_blocks(self) -> int:
        return len(self._lru)

    def chain(self, data: bytes) -> tuple[int, ...]:
        """The names of the full blocks of ``data`` (:func:`block_chain`)."""
        return tuple(block_chain(data, self.block_bytes))

    def admit(self, blocks: tuple[int, ...], prompt_tokens: int) -> int:
        """A sequence starts: pin its cached leading blocks; returns how many (counted in
        ``queries``/``hits``, at most the blocks wholly before the prompt's last token)."""
        most = min(len(blocks), (prompt_tokens - 1) // self.block_tokens)
        refs, lru = self._refs, self._lru
        hit = 0
        while hit < most:
            name = blocks[hit]
            if name not in refs and name not in lru:
                break
            hit += 1
        self.pin(blocks, 0, hit)
        self.queries += prompt_tokens
        self.hits += hit * self.block_tokens
        return hit

    def pin(self, blocks: tuple[int, ...], start: int, end: int) -> None:
        """Pin ``blocks[start:end]`` (found cached, or just computed)."""
        refs, lru = self._refs, self._lru
        for name in blocks[start:end]:
            held = refs.get(name)
            if held is None:
                lru.pop(name, None)
                refs[name] = 1
            else:
                refs[name] = held + 1

    def release(self, blocks: tuple[int, ...], pinned: int) -> None:
        """A sequence ended: unpin ``blocks[:pinned]``, last first, then evict over capacity."""
        refs, lru = self._refs, self._lru
        for i in range(pinned - 1, -1, -1):
            name = blocks[i]
            held = refs[name]
            if held > 1:
                refs[name] = held - 1
            else:
                del refs[name]
                lru[name] = None
        over = len(lru) - self.capacity_blocks
        if over > 0:
            self.evictions += over
            for _ in range(over):
                lru.popitem(last=False)
