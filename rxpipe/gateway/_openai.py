"""The OpenAI-compatible wire format: response and SSE chunk shapes (requests:
:mod:`~rxpipe.gateway._openai_request`).

Shapes follow OpenAI's API reference for ``/v1/completions`` (``text_completion``),
``/v1/chat/completions`` (``chat.completion`` / ``chat.completion.chunk``), ``/v1/embeddings``
and ``/v1/responses``, so the official ``openai`` client and ``curl`` work unchanged. What the
backend said beyond text (tool calls, refusal, reasoning, log probabilities, usage, the system
fingerprint: :class:`~rxpipe.serving.CompletionResult`, :class:`~rxpipe.serving.TokenChunk`) is
written as it said it; ``id``, ``created`` and ``model`` are the edge's own.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import orjson

from ..serving import UNANSWERED_REASONS, CompletionRequest, CompletionResult
from ._openai_request import InvalidRequest, parse_embeddings, parse_request, parse_responses

__all__ = ["InvalidRequest", "parse_request", "parse_embeddings", "parse_responses", "completion_body",
           "chunk_body", "error_body", "sse", "token_event_template", "embeddings_body", "responses_event",
           "responses_error_event", "usage_of"]

def usage_of(result: CompletionResult) -> Mapping[str, Any]:
    """The answer's ``usage``: the backend's own object as it sent it (details included), else
    ``prompt_tokens``, ``completion_tokens`` and ``total_tokens`` from the result's counts."""
    usage = result.usage
    if usage is not None:
        return usage
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens}


def _finish_reason(result: CompletionResult) -> str:
    """The model's finish reason as the engine gave it (never replaced by ``"stop"``). The edge
    answers the reasons that are no answer (``UNANSWERED_REASONS``) before any body is built."""
    reason = result.finish_reason
    if reason in UNANSWERED_REASONS:
        raise ValueError(f"finish reason {reason!r} is not an answer (the edge refuses it)")
    return reason


def completion_body(request: CompletionRequest, result: CompletionResult, *, chat: bool, created: int) -> bytes:
    """The non-streaming answer, in OpenAI's JSON shape: the message's fields besides the text
    (``tool_calls``, ``refusal``, ...), ``logprobs``, ``usage`` and ``system_fingerprint`` as the
    backend said them."""
    if chat:
        message: dict[str, Any] = {"role": "assistant", "content": result.text}
        if result.message:
            message.update(result.message)
        choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": result.logprobs,
                                  "finish_reason": _finish_reason(result)}
        obj = "chat.completion"
    else:
        choice = {"text": result.text, "index": 0, "logprobs": result.logprobs, "finish_reason": _finish_reason(result)}
        obj = "text_completion"
    answer = {"id": request.id, "object": obj, "created": created, "model": request.model,
              "choices": [choice], "usage": usage_of(result)}
    if result.system_fingerprint is not None:
        answer["system_fingerprint"] = result.system_fingerprint
    return orjson.dumps(answer)


def chunk_body(request: CompletionRequest, *, chat: bool, created: int, text: str | None = None,
               role: bool = False, result: CompletionResult | None = None, usage_only: bool = False,
               delta: Mapping[str, Any] | None = None, logprobs: Any = None) -> bytes:
    """One streamed chunk (``data:`` payload). ``result`` given → the final chunk with
    ``finish_reason`` (and the backend's ``system_fingerprint``); ``usage_only`` → the trailing
    usage chunk of ``include_usage``. ``delta``: the chunk's delta fields besides the text, as the
    backend sent them (a ``tool_calls`` fragment, ``reasoning_content`` ...); ``logprobs``: the
    chunk's log probabilities."""
    extra: dict[str, Any] = {}
    if usage_only:
        assert result is not None
        choices: list[dict[str, Any]] = []
        extra["usage"] = usage_of(result)
    else:
        finish = _finish_reason(result) if result is not None else None
        if chat:
            body: dict[str, Any] = {}
            if role:
                body["role"] = "assistant"
            if text is not None and (text or delta is None):
                body["content"] = text
            if delta:
                body.update(delta)
            choices = [{"index": 0, "delta": body, "logprobs": logprobs, "finish_reason": finish}]
        else:
            choices = [{"text": text or "", "index": 0, "logprobs": logprobs, "finish_reason": finish}]
    if result is not None and result.system_fingerprint is not None:
        extra["system_fingerprint"] = result.system_fingerprint
    return orjson.dumps({"id": request.id, "object": "chat.completion.chunk" if chat else "text_completion",
                         "created": created, "model": request.model, "choices": choices, **extra})


def embeddings_body(request: CompletionRequest, result: CompletionResult) -> bytes:
    """The answer to ``POST /v1/embeddings``: the backend's ``data`` (the vectors, in input
    order, float lists or base64 as asked) and ``usage`` as it sent them, the edge's ``model``."""
    answer = result.answer or {}
    usage = answer.get("usage") or {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens}
    return orjson.dumps({"object": "list", "data": answer.get("data", []), "model": request.model, "usage": usage})


def responses_event(event: Mapping[str, Any]) -> bytes:
    """One event of a streamed Responses answer, as the backend sent it: ``event: <type>`` then
    ``data: <the event>`` (OpenAI's Responses streaming)."""
    kind = event.get("type")
    head = b"event: " + str(kind).encode() + b"\n" if isinstance(kind, str) else b""
    return head + b"data: " + orjson.dumps(event) + b"\n\n"


def responses_error_event(message: str, code: str, sequence_number: int) -> bytes:
    """The ``error`` event that ends a Responses stream the edge could not finish (OpenAI's
    ``ResponseErrorEvent``: ``type``, ``code``, ``message``, ``param``, ``sequence_number``)."""
    return responses_event({"type": "error", "code": code, "message": message, "param": None,
                            "sequence_number": sequence_number})


#: the text of :func:`token_event_template`'s probe chunk (orjson writes it as ``"\u0000"``)
_PROBE = "\x00"


def token_event_template(request: CompletionRequest, *, chat: bool, created: int) -> tuple[bytes, bytes]:
    """``(prefix, suffix)`` of one token's SSE event: ``prefix + orjson.dumps(text) + suffix`` is
    byte for byte ``sse(chunk_body(request, chat=chat, created=created, text=text))``, built once
    per stream instead of a dict and a whole-object encode per token."""
    event = sse(chunk_body(request, chat=chat, created=created, text=_PROBE))
    prefix, probe, suffix = event.partition(orjson.dumps(_PROBE))
    assert probe and suffix.find(probe) < 0, "the probe text occurs once in a token chunk"
    return prefix, suffix


def sse(payload: bytes) -> bytes:
    """An SSE event carrying ``payload`` (``data: ...`` then a blank line)."""
    return b"data: " + payload + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def error_body(message: str, type: str, code: str, param: str | None = None) -> bytes:
    """``{"error": {"message", "type", "code", "param"}}`` (OpenAI's error shape)."""
    return orjson.dumps({"error": {"message": message, "type": type, "code": code, "param": param}})


def now_created() -> int:
    """``created`` timestamps are Unix seconds (wall clock), as OpenAI sends them."""
    return int(time.time())
