"""Prompt blocks: the chain of block names a prompt prefix is known by (DESIGN §8b).

Shared by the router's prefix affinity (``ops.prefix_affinity``) and the simulated engine's
prefix cache, so both name a prefix the same way: a block is ``size`` characters (or bytes) of
the prompt, named by the hash of its content and of the name of the block before it.
"""

from __future__ import annotations

from typing import Any

from .records import CompletionRequest

__all__ = ["prompt_bytes", "block_chain"]


def prompt_bytes(request: CompletionRequest) -> bytes:
    """The bytes of ``request``'s prompt the token estimate counts: ``prompt``, or the text of
    every message's content, in order."""
    if request.prompt is not None:
        return request.prompt.encode("utf-8")
    parts: list[str] = []
    for message in request.messages or ():
        content: Any = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return "".join(parts).encode("utf-8")


def block_chain(data: str | bytes, size: int) -> list[int]:
    """The names of the full blocks of ``size`` characters (or bytes) of ``data``, in order:
    each is a hash of the block and of the name before it, so it stands for the whole prefix
    up to its end (vLLM's block hashes; Python's ``hash``: stable within one process only)."""
    names: list[int] = []
    parent = 0
    for start in range(0, len(data) - size + 1, size):
        parent = hash((parent, data[start:start + size]))
        names.append(parent)
    return names
