"""The OpenAI-compatible wire format: request validation, response and SSE chunk shapes.

Shapes follow OpenAI's API reference for ``/v1/completions`` (``text_completion``) and
``/v1/chat/completions`` (``chat.completion`` / ``chat.completion.chunk``), so the official
``openai`` client and ``curl`` work unchanged.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..serving import UNANSWERED_REASONS, CompletionRequest, CompletionResult
from ..serving._ids import new_id_hex

__all__ = ["InvalidRequest", "parse_request", "completion_body", "chunk_body", "error_body", "sse",
           "token_event_template"]

_SAMPLING_FIELDS = {
    "temperature": (int, float), "top_p": (int, float), "presence_penalty": (int, float),
    "frequency_penalty": (int, float), "seed": (int,), "stop": (str, list), "logit_bias": (dict,),
    "user": (str,), "top_k": (int,), "logprobs": (bool, int), "top_logprobs": (int,),
    "echo": (bool,), "suffix": (str,), "response_format": (dict,), "tools": (list,),
    "tool_choice": (str, dict), "parallel_tool_calls": (bool,), "metadata": (dict,),
}
_ROLES = {"system", "user", "assistant", "tool", "developer", "function"}


class InvalidRequest(Exception):
    """A request the edge refuses with a 4xx: carries status, OpenAI error type and code."""

    def __init__(self, message: str, *, status: int = 400, type: str = "invalid_request_error",
                 code: str = "invalid_request", param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.code = code
        self.param = param


def _fail(message: str, code: str, param: str | None = None) -> InvalidRequest:
    return InvalidRequest(message, code=code, param=param)


def _text_of(content: Any, index: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise _fail(f"messages[{index}].content: only text parts are supported",
                            "invalid_content", f"messages[{index}].content")
            parts.append(part["text"])
        return "".join(parts)
    if content is None:
        return ""
    raise _fail(f"messages[{index}].content must be a string or a list of text parts",
                "invalid_content", f"messages[{index}].content")


def parse_request(body: bytes, *, chat: bool, default_model: str, max_tokens_limit: int,
                  max_model_len: int | None = None, default_max_tokens: int | None = None) -> CompletionRequest:
    """Validate a JSON body into a :class:`CompletionRequest` (not yet admitted).

    Raises InvalidRequest (400) for malformed JSON, a non-object body, a missing or wrong
    ``prompt``/``messages``, a bad ``max_tokens`` (int in [1, max_tokens_limit]), ``n`` other
    than the integer 1, mistyped sampling fields, ``temperature`` outside [0, 2], ``top_p``
    outside (0, 1], ``stop`` other than a string or a list of at most 4 strings; and, with
    ``max_model_len`` (tokens), code ``context_length_exceeded`` when prompt tokens (the
    documented estimate, :func:`~rxpipe.engines.estimate_tokens`) plus ``max_tokens`` exceed it,
    in vLLM's words. A missing ``max_tokens`` becomes what remains of ``max_model_len``, capped
    by ``default_max_tokens`` (``max_tokens_defaulted`` is then set). The model is checked by
    the caller (404).
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise _fail(f"request body is not valid JSON: {error}", "invalid_json") from None
    if not isinstance(data, dict):
        raise _fail("request body must be a JSON object", "invalid_json")
    model = data.get("model", default_model)
    if not isinstance(model, str) or not model:
        raise _fail("'model' must be a non-empty string", "invalid_model", "model")
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    if chat:
        raw = data.get("messages")
        if raw is None:
            raise _fail("'messages' is required", "missing_messages", "messages")
        if not isinstance(raw, list) or not raw:
            raise _fail("'messages' must be a non-empty array", "invalid_messages", "messages")
        messages = []
        for i, message in enumerate(raw):
            if not isinstance(message, dict):
                raise _fail(f"messages[{i}] must be an object", "invalid_messages", f"messages[{i}]")
            role = message.get("role")
            if role not in _ROLES:
                raise _fail(f"messages[{i}].role must be one of {sorted(_ROLES)}", "invalid_role",
                            f"messages[{i}].role")
            messages.append({"role": role, "content": _text_of(message.get("content"), i)})
    else:
        raw = data.get("prompt")
        if raw is None:
            raise _fail("'prompt' is required", "missing_prompt", "prompt")
        if isinstance(raw, list):
            if len(raw) != 1 or not isinstance(raw[0], str):
                raise _fail("'prompt' must be a string (or a list of exactly one string)", "invalid_prompt", "prompt")
            raw = raw[0]
        if not isinstance(raw, str):
            raise _fail("'prompt' must be a string", "invalid_prompt", "prompt")
        prompt = raw
    max_tokens = data.get("max_completion_tokens", data.get("max_tokens")) if chat else data.get("max_tokens")
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= max_tokens_limit:
            raise _fail(f"'max_tokens' must be an integer in [1, {max_tokens_limit}], got {max_tokens!r}",
                        "invalid_max_tokens", "max_tokens")
    n = data.get("n", 1)
    if n is not None and (type(n) is not int or n != 1):
        raise _fail(f"only n=1 is supported, got {n!r}", "invalid_n", "n")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise _fail("'stream' must be a boolean", "invalid_stream", "stream")
    stream_options = data.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise _fail("'stream_options' must be an object", "invalid_stream_options", "stream_options")
    sampling: dict[str, Any] = {}
    for key, value in data.items():  # the body's few keys, not every known field
        types = _SAMPLING_FIELDS.get(key)
        if types is not None and value is not None:
            if isinstance(value, bool) and bool not in types:
                raise _fail(f"'{key}' has the wrong type", "invalid_type", key)
            if not isinstance(value, types):
                raise _fail(f"'{key}' has the wrong type", "invalid_type", key)
            sampling[key] = value
    _check_ranges(sampling)
    if stream_options and stream_options.get("include_usage"):
        sampling["include_usage"] = True
    request = CompletionRequest(prompt=prompt, messages=messages, max_tokens=max_tokens, model=model,
                                stream=stream, sampling=sampling,
                                id=("chatcmpl-" if chat else "cmpl-") + new_id_hex())
    if max_model_len is not None:
        _fit_context(request, chat, max_model_len, default_max_tokens)
    return request


def _check_ranges(sampling: dict[str, Any]) -> None:
    """The sampling fields' ranges (OpenAI's API reference; vLLM refuses the same values)."""
    temperature = sampling.get("temperature")
    if temperature is not None and not 0 <= temperature <= 2:
        raise _fail(f"'temperature' must be in [0, 2], got {temperature!r}", "invalid_temperature", "temperature")
    top_p = sampling.get("top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise _fail(f"'top_p' must be in (0, 1], got {top_p!r}", "invalid_top_p", "top_p")
    stop = sampling.get("stop")
    if isinstance(stop, list) and (len(stop) > 4 or not all(isinstance(s, str) for s in stop)):
        raise _fail("'stop' must be a string or a list of at most 4 strings", "invalid_stop", "stop")


def _fit_context(request: CompletionRequest, chat: bool, max_model_len: int, default_max_tokens: int | None) -> None:
    """Refuse a request whose prompt plus completion exceeds ``max_model_len`` (400
    ``context_length_exceeded``, vLLM's message), and fill in a missing ``max_tokens``."""
    prompt_tokens = request.prompt_tokens
    wanted = request.max_tokens
    completion = wanted if wanted is not None else 1
    if prompt_tokens + completion > max_model_len:
        where = "messages" if chat else "prompt"
        shown = wanted if wanted is not None else 0
        raise InvalidRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + shown} tokens ({prompt_tokens} in the {where}, {shown} in the completion). "
            f"Please reduce the length of the {where} or completion.",
            code="context_length_exceeded", param=where)
    if wanted is None:
        remaining = max_model_len - prompt_tokens
        request.max_tokens = remaining if default_max_tokens is None else min(remaining, default_max_tokens)
        request.max_tokens_defaulted = True


def _usage(result: CompletionResult) -> dict[str, int]:
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
    """The non-streaming answer, in OpenAI's JSON shape."""
    if chat:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": result.text},
                                  "logprobs": None, "finish_reason": _finish_reason(result)}
        obj = "chat.completion"
    else:
        choice = {"text": result.text, "index": 0, "logprobs": None, "finish_reason": _finish_reason(result)}
        obj = "text_completion"
    return orjson.dumps({"id": request.id, "object": obj, "created": created, "model": request.model,
                        "choices": [choice], "usage": _usage(result)})


def chunk_body(request: CompletionRequest, *, chat: bool, created: int, text: str | None = None,
               role: bool = False, result: CompletionResult | None = None, usage_only: bool = False) -> bytes:
    """One streamed chunk (``data:`` payload). ``result`` given → the final chunk with
    ``finish_reason``; ``usage_only`` → the trailing usage chunk of ``include_usage``."""
    if usage_only:
        assert result is not None
        choices: list[dict[str, Any]] = []
        extra: dict[str, Any] = {"usage": _usage(result)}
    else:
        finish = _finish_reason(result) if result is not None else None
        if chat:
            delta: dict[str, Any] = {}
            if role:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        else:
            choices = [{"text": text or "", "index": 0, "logprobs": None, "finish_reason": finish}]
        extra = {}
    return orjson.dumps({"id": request.id, "object": "chat.completion.chunk" if chat else "text_completion",
                         "created": created, "model": request.model, "choices": choices, **extra})


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
