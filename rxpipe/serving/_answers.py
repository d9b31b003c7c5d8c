"""What an answer carries beyond text, as data (DESIGN §5, "Edge, third round"): a streamed answer's
deltas folded into the whole answer's message, and a whole message turned back into deltas.

Shapes are OpenAI's Chat Completions ones: a streamed choice ``delta`` holds ``content`` and
maybe ``tool_calls`` fragments (each keyed by ``index``: the first fragment of a call carries its
``id``, ``type`` and ``function.name``, the following ones pieces of ``function.arguments`` that
concatenate to the arguments), ``function_call`` (the legacy single call: ``name`` and
``arguments`` pieces), ``refusal`` and ``reasoning_content`` (text pieces); a whole ``message``
holds the same fields whole, ``tool_calls`` as a list without ``index``. Log probabilities:
chat's ``{"content": [...], "refusal": [...]}`` and completions' ``{"tokens", "token_logprobs",
"top_logprobs", "text_offset"}`` are lists that concatenate chunk after chunk.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from .records import FINISH_REASONS, CompletionResult

__all__ = ["AnswerBuilder", "message_deltas", "answer_tokens", "finish_reason_of", "merge_logprobs",
           "replay_pieces", "OPENAI_FINISH_REASONS"]

#: the finish reasons of OpenAI's API, passed on as a backend says them; any other is "stop"
OPENAI_FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "function_call", "content_filter"})

#: delta fields that are text pieces concatenating to the message's field
_TEXT_FIELDS = frozenset({"refusal", "reasoning_content", "reasoning"})


def finish_reason_of(backend_reason: Any) -> str:
    """A backend's ``finish_reason`` as one of :data:`~rxpipe.serving.FINISH_REASONS`: OpenAI's
    own reasons as they are, anything else (None, a server's ``"abort"`` or ``"eos"``) ``"stop"``."""
    return backend_reason if backend_reason in OPENAI_FINISH_REASONS else "stop"


assert OPENAI_FINISH_REASONS <= set(FINISH_REASONS)


def merge_logprobs(total: Any, more: Any) -> Any:
    """``more`` log probabilities after ``total``: every list of the object concatenates (chat's
    ``content`` and ``refusal``, completions' ``tokens``, ``token_logprobs``, ``top_logprobs``,
    ``text_offset``); a field that is not a list takes the last value. None on either side is
    the other."""
    if total is None:
        return dict(more) if isinstance(more, dict) else more
    if not isinstance(total, dict) or not isinstance(more, dict):
        return more if more is not None else total
    for key, value in more.items():
        mine = total.get(key)
        if isinstance(mine, list) and isinstance(value, list):
            total[key] = mine + value
        elif value is not None or key not in total:
            total[key] = list(value) if isinstance(value, list) else value
    return total


class AnswerBuilder:
    """Folds the deltas of one streamed choice into the whole answer's message fields and log
    probabilities (what a non-streamed answer would have said), for the result of a streamed
    answer: a cache hit, a failover or a client that was not streamed then have it whole.

    ``add(delta)``: one delta's fields besides ``role`` and ``content`` (None values are no
    field); ``add_logprobs(logprobs)``; ``message(text)``: the message fields, or None when the
    deltas carried none (text only); ``logprobs``: the concatenation, or None.
    """

    __slots__ = ("fields", "calls", "logprobs")

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        #: tool calls by their ``index``, in the order their first fragment came
        self.calls: dict[Any, dict[str, Any]] = {}
        self.logprobs: Any = None

    def add(self, delta: Mapping[str, Any]) -> None:
        fields = self.fields
        for key, value in delta.items():
            if value is None or key in ("role", "content"):
                continue
            if key == "tool_calls" and isinstance(value, list):
                for fragment in value:
                    if isinstance(fragment, dict):
                        self._add_call(fragment)
            elif key == "function_call" and isinstance(value, dict):
                call = fields.setdefault("function_call", {})
                _fold(call, value)
            elif key in _TEXT_FIELDS and isinstance(value, str) and isinstance(fields.get(key), str):
                fields[key] += value
            else:
                fields[key] = value

    def _add_call(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index", len(self.calls))
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = {}
        for key, value in fragment.items():
            if key == "index" or value is None:
                continue
            if key == "function" and isinstance(value, dict):
                _fold(call.setdefault("function", {}), value)
            else:
                call[key] = value

    def add_logprobs(self, logprobs: Any) -> None:
        if logprobs is not None:
            self.logprobs = merge_logprobs(self.logprobs, logprobs)

    def message(self, text: str) -> dict[str, Any] | None:
        """The message fields besides role and content (``content`` None when the answer has no
        text and is a tool call, a function call or a refusal, as OpenAI says it), or None."""
        if not self.fields and not self.calls:
            return None
        message = dict(self.fields)
        if self.calls:
            message["tool_calls"] = [self.calls[k] for k in self.calls]
        if not text and ("tool_calls" in message or "function_call" in message or "refusal" in message):
            message["content"] = None
        return message


def _fold(whole: dict[str, Any], piece: Mapping[str, Any]) -> None:
    """A function fragment onto the function so far: ``arguments`` concatenate; so does ``name``
    unless the fragment repeats the whole name (llama.cpp's server sends it in every fragment,
    OpenAI and vLLM in the first only)."""
    for key, value in piece.items():
        if value is None:
            continue
        mine = whole.get(key)
        if key == "arguments" and isinstance(value, str) and isinstance(mine, str):
            whole[key] = mine + value
        elif key == "name" and isinstance(value, str) and isinstance(mine, str) and value != mine:
            whole[key] = mine + value
        else:
            whole[key] = value


def message_deltas(message: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The deltas that stream a whole message's fields besides content, each one chunk: one per
    text-like field (reasoning first, so it comes before the content as it is made), then one
    per tool call (whole, with its ``index``), then the legacy ``function_call``. Content and a
    null ``content`` are not in them (the text is streamed on its own)."""
    if not message:
        return []
    first: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for key, value in message.items():
        if key in ("role", "content") or value is None:
            continue
        if key == "tool_calls" and isinstance(value, list):
            calls += [{"tool_calls": [{"index": i, **call}]} for i, call in enumerate(value) if isinstance(call, dict)]
        elif key == "function_call":
            calls.append({"function_call": value})
        else:
            first.append({key: value})
    return first + calls


def answer_tokens(text: str, message: Mapping[str, Any] | None) -> int:
    """The estimate of an answer's tokens when the backend says none: 1 token per 4 UTF-8 bytes
    (rounded up) of its text and of its message's other text (reasoning, refusal, tool calls'
    names and arguments); 0 for an empty answer. The same for the answer streamed or not."""
    size = len(text.encode("utf-8"))
    if message:
        for key, value in message.items():
            if key == "tool_calls" and isinstance(value, list):
                for call in value:
                    function = call.get("function") if isinstance(call, dict) else None
                    size += _function_bytes(function)
            elif key == "function_call":
                size += _function_bytes(value)
            elif key != "content" and isinstance(value, str):
                size += len(value.encode("utf-8"))
    return math.ceil(size / 4)


def _function_bytes(function: Any) -> int:
    if not isinstance(function, dict):
        return 0
    return sum(len(v.encode("utf-8")) for k in ("name", "arguments") if isinstance(v := function.get(k), str))


def replay_pieces(result: CompletionResult, words: list[str]) -> list[tuple[str, Mapping[str, Any] | None, Any]]:
    """The chunks that stream a finished ``result`` again (a cache hit): ``(text, delta,
    logprobs)`` each. Text goes as ``words`` (its pieces); with log probabilities whose tokens
    spell the text, one chunk per token carrying its own; the message's other fields as
    :func:`message_deltas` (reasoning before the text, tool calls after it)."""
    deltas = message_deltas(result.message)
    before = [(("", d, None)) for d in deltas if "tool_calls" not in d and "function_call" not in d]
    after = [(("", d, None)) for d in deltas if "tool_calls" in d or "function_call" in d]
    text_pieces: list[tuple[str, Mapping[str, Any] | None, Any]] = [(w, None, None) for w in words]
    logprobs = result.logprobs
    if isinstance(logprobs, dict):
        entries = logprobs.get("content")
        if isinstance(entries, list) and entries and all(isinstance(e, dict) for e in entries) \
                and "".join(str(e.get("token", "")) for e in entries) == result.text:
            text_pieces = [(str(e.get("token", "")), None, {"content": [e]}) for e in entries]
        elif isinstance(logprobs.get("tokens"), list) and "".join(map(str, logprobs["tokens"])) == result.text:
            fields = [k for k, v in logprobs.items() if isinstance(v, list) and len(v) == len(logprobs["tokens"])]
            text_pieces = [(str(token), None, {k: [logprobs[k][i]] for k in fields})
                           for i, token in enumerate(logprobs["tokens"])]
        elif text_pieces:  # not tokens of this text: all of them with the whole text
            text_pieces = [(result.text, None, logprobs)]
    return before + text_pieces + after
