"""What travels through Redis: request entries and reply messages, one orjson field each.

A request entry (stream ``settings.stream``) has one field ``r``: ``{"id", "prompt", "messages",
"max_tokens", "model", "stream", "sampling", "api_key_id", "reply_to", "deadline_unix"}``.

A reply message (stream ``reply_to``, one per gateway) has one field ``m``: ``{"id", "k", ...}``
where ``k`` is ``"start"`` (the worker's engine admitted the request), ``"chunk"`` (``i``: chunk
index, 0, 1, ... per attempt; ``t``: text; ``n``: tokens), ``"done"`` (``r``: the result's
fields) or ``"error"`` (``e``: message; ``u``: true when the engine was unavailable).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ..engines import CompletionRequest, CompletionResult, TokenChunk
from ..errors import BackendError, EngineError, EngineUnavailableError

__all__ = ["REQUEST_FIELD", "REPLY_FIELD", "encode_request", "decode_request", "start_message", "chunk_message",
           "done_message", "error_message", "decode_reply", "result_from_fields"]

REQUEST_FIELD = b"r"
REPLY_FIELD = b"m"


def encode_request(request: CompletionRequest, reply_to: str, now_loop_s: float) -> dict[bytes, bytes]:
    """The entry for ``request``; its deadline (loop clock) becomes a Unix time (wall clock)."""
    deadline = None
    if request.deadline_s is not None:
        deadline = time.time() + (request.deadline_s - now_loop_s)
    return {REQUEST_FIELD: orjson.dumps({
        "id": request.id, "prompt": request.prompt, "messages": request.messages,
        "max_tokens": request.max_tokens, "model": request.model, "stream": request.stream,
        "sampling": request.sampling, "api_key_id": request.api_key_id, "reply_to": reply_to,
        "deadline_unix": deadline})}


def decode_request(fields: dict[bytes, bytes]) -> dict[str, Any]:
    """The request's fields (raises ValueError for an entry that is not one of ours)."""
    raw = fields.get(REQUEST_FIELD)
    if raw is None:
        raise ValueError(f"stream entry without the {REQUEST_FIELD!r} field")
    data = orjson.loads(raw)
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not isinstance(data.get("reply_to"), str):
        raise ValueError("stream entry is not an rxpipe request")
    return data


def _message(payload: dict[str, Any]) -> dict[bytes, bytes]:
    return {REPLY_FIELD: orjson.dumps(payload)}


def start_message(request_id: str) -> dict[bytes, bytes]:
    return _message({"id": request_id, "k": "start"})


def chunk_message(request_id: str, chunk: TokenChunk) -> dict[bytes, bytes]:
    return _message({"id": request_id, "k": "chunk", "i": chunk.index, "t": chunk.text, "n": chunk.tokens})


def done_message(request_id: str, result: CompletionResult) -> dict[bytes, bytes]:
    return _message({"id": request_id, "k": "done", "r": {
        "text": result.text, "finish_reason": result.finish_reason, "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens, "queue_time_s": result.queue_time_s,
        "ttft_s": result.ttft_s, "e2e_s": result.e2e_s}})


def error_message(request_id: str, message: str, *, unavailable: bool,
                  backend: BackendError | None = None) -> dict[bytes, bytes]:
    """An error reply; ``backend``: a backend's error the gateway passes on as it is (its status
    and client message, under ``"b"``)."""
    fields: dict[str, Any] = {"id": request_id, "k": "error", "e": message, "u": unavailable}
    if backend is not None:
        fields["b"] = {"status": backend.status, "backend_status": backend.backend_status,
                       "client_message": backend.client_message, "type": backend.type, "code": backend.code,
                       "param": backend.param}
    return _message(fields)


def error_from_fields(message: dict[str, Any]) -> EngineError:
    """The error an ``error`` reply stands for: a :class:`~rxpipe.BackendError` with what the
    client gets, else ``EngineUnavailableError`` (``"u"``) or ``EngineError``."""
    text = str(message.get("e", "the worker failed the request"))
    backend = message.get("b")
    if isinstance(backend, dict):
        try:
            return BackendError(text, status=int(backend["status"]), backend_status=int(backend["backend_status"]),
                                client_message=str(backend["client_message"]), type=str(backend["type"]),
                                code=backend.get("code"), param=backend.get("param"))
        except (KeyError, TypeError, ValueError):
            pass  # a malformed one: the plain error below
    return EngineUnavailableError(text) if message.get("u") else EngineError(text)


def decode_reply(fields: dict[bytes, bytes]) -> dict[str, Any] | None:
    """The reply message, or None for an entry that is not one (e.g. the stream's first entry)."""
    raw = fields.get(REPLY_FIELD)
    if raw is None:
        return None
    data = orjson.loads(raw)
    return data if isinstance(data, dict) and isinstance(data.get("id"), str) else None


def result_from_fields(fields: dict[str, Any]) -> CompletionResult:
    return CompletionResult(str(fields["text"]), str(fields["finish_reason"]), int(fields["prompt_tokens"]),
                            int(fields["completion_tokens"]), float(fields["queue_time_s"]),
                            None if fields["ttft_s"] is None else float(fields["ttft_s"]), float(fields["e2e_s"]))
