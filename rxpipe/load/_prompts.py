"""Prompts for ``rxpipe load``: the small set shipped in the package, or a user's JSONL file."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

__all__ = ["Prompt", "default_prompts", "read_prompts", "parse_prompts"]


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request body's content: ``prompt`` (completions) or ``messages`` (chat), and an
    optional per-prompt ``max_tokens`` that overrides ``--max-tokens``."""

    prompt: str | None = None
    messages: tuple[dict[str, Any], ...] | None = None
    max_tokens: int | None = None


def parse_prompts(text: str, source: str = "<prompts>") -> list[Prompt]:
    """Parse JSONL: one object per non-empty line with ``"prompt": str`` or ``"messages": [...]``
    (OpenAI chat messages) and optionally ``"max_tokens": int >= 1``.

    Raises: ValueError naming ``source`` and the line for invalid JSON or fields, or no prompts.
    """
    prompts: list[Prompt] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as error:
            raise ValueError(f"{where}: not JSON: {error}") from None
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object")
        prompt, messages, max_tokens = row.get("prompt"), row.get("messages"), row.get("max_tokens")
        if prompt is None and messages is None:
            raise ValueError(f"{where}: needs \"prompt\" (a string) or \"messages\" (a list)")
        if prompt is not None and not isinstance(prompt, str):
            raise ValueError(f"{where}: \"prompt\" must be a string")
        if messages is not None and not (isinstance(messages, list) and all(isinstance(m, dict) for m in messages)):
            raise ValueError(f"{where}: \"messages\" must be a list of objects")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 1):
            raise ValueError(f"{where}: \"max_tokens\" must be an int >= 1")
        prompts.append(Prompt(prompt, tuple(messages) if messages is not None else None, max_tokens))
    if not prompts:
        raise ValueError(f"{source}: no prompts")
    return prompts


def read_prompts(path: str | Path) -> list[Prompt]:
    """The prompts of a JSONL file (see :func:`parse_prompts`). Raises OSError, ValueError."""
    path = Path(path)
    return parse_prompts(path.read_text(encoding="utf-8"), str(path))


def default_prompts() -> list[Prompt]:
    """The small prompt set shipped with rxpipe (``rxpipe/load/prompts.jsonl``)."""
    text = resources.files("rxpipe.load").joinpath("prompts.jsonl").read_text(encoding="utf-8")
    return parse_prompts(text, "rxpipe/load/prompts.jsonl")
