"""What crosses the broker: requests, replies and control messages, one orjson object each.

A request: ``{"id", "prompt", "messages", "max_tokens", "max_tokens_defaulted", "model",
"stream", "sampling", "api_key_id", "reply_to", "budget_s", "credit"}``. ``budget_s`` is the time left
before the request's deadline when it was queued (None: no deadline): a relative time, so the
worker measures the time spent in the queue on the broker's clock, never on a host's.

A reply (on the ``reply_to`` channel of one gateway): ``{"id", "k", ...}`` where ``k`` is
``"start"`` (a worker's engine admitted it; ``w``: the worker's consumer name), ``"chunk"``
(``i``: sequence number of the chunk, 0, 1, ... per attempt; ``t``: text; ``n``: tokens),
``"done"`` (``r``: the result's fields) or ``"error"`` (``e``: message; ``u``: true when the
engine was unavailable; ``b``: a backend's error the gateway passes on as it is — its client's
status and OpenAI error fields, see :class:`~rxpipe.BackendError` — so a 4xx of a worker's backend
reaches the client with its status and message, over every broker).

A control message (gateway to every worker): ``{"k": "cancel", "id", "g"}`` (the client left;
``g``: seconds it spent at the gateway before being written) or ``{"k": "credit", "c": {id:
cumulative credit in chunks, ...}}`` (Akka StreamRefs' CumulativeDemand: idempotent, resent while
a stream waits for it).
"""

from __future__ import annotations

from typing import Any

import orjson

from ..errors import BackendError, EngineError, EngineUnavailableError
from ..serving import CompletionRequest, CompletionResult, TokenChunk

__all__ = ["encode_request", "decode_request", "start_payload", "chunk_payload", "done_payload", "error_payload",
           "error_from_fields", "decode_reply", "result_from_fields", "cancel_payload", "credit_payload",
           "decode_control"]


def encode_request(request: CompletionRequest, reply_to: str, now_loop_s: float, *,
                   credit: int | None = None) -> bytes:
    """The wire form of ``request``; its deadline (loop clock) becomes a budget (seconds left);
    ``credit``: the first credit window of a streamed answer (chunks; None: no credit)."""
    budget = None if request.deadline_s is None else request.deadline_s - now_loop_s
    return orjson.dumps({"credit": credit,
        "id": request.id, "prompt": request.prompt, "messages": request.messages,
        "max_tokens": request.max_tokens, "max_tokens_defaulted": request.max_tokens_defaulted,
        "model": request.model, "stream": request.stream, "sampling": request.sampling,
        "api_key_id": request.api_key_id, "reply_to": reply_to, "budget_s": budget})


def decode_request(raw: bytes | None) -> dict[str, Any]:
    """The request's fields (raises ValueError for a payload that is not one of ours)."""
    if raw is None:
        raise ValueError("no request payload")
    data = orjson.loads(raw)
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not isinstance(data.get("reply_to"), str):
        raise ValueError("not an rxpipe request")
    return data


def start_payload(request_id: str, worker: str = "") -> bytes:
    return orjson.dumps({"id": request_id, "k": "start", "w": worker})


def chunk_payload(request_id: str, chunk: TokenChunk) -> bytes:
    return orjson.dumps({"id": request_id, "k": "chunk", "i": chunk.index, "t": chunk.text, "n": chunk.tokens})


def done_payload(request_id: str, result: CompletionResult) -> bytes:
    return orjson.dumps({"id": request_id, "k": "done", "r": {
        "text": result.text, "finish_reason": result.finish_reason, "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens, "queue_time_s": result.queue_time_s,
        "ttft_s": result.ttft_s, "e2e_s": result.e2e_s}})


def error_payload(request_id: str, message: str, *, unavailable: bool, backend: BackendError | None = None) -> bytes:
    """An error reply; ``backend``: a backend's error the gateway passes on as it is (its status
    and client message, under ``"b"``)."""
    fields: dict[str, Any] = {"id": request_id, "k": "error", "e": message, "u": unavailable}
    if backend is not None:
        fields["b"] = {"status": backend.status, "backend_status": backend.backend_status,
                       "client_message": backend.client_message, "type": backend.type, "code": backend.code,
                       "param": backend.param}
    return orjson.dumps(fields)


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


def decode_reply(raw: bytes | None) -> dict[str, Any] | None:
    """The reply message, or None for a payload that is not one."""
    if raw is None:
        return None
    data = orjson.loads(raw)
    return data if isinstance(data, dict) and isinstance(data.get("id"), str) else None


def result_from_fields(fields: dict[str, Any]) -> CompletionResult:
    """The result a ``done`` reply carries. Its finish reason crosses as the worker's engine gave
    it (one vocabulary from the engine to the client, see
    :data:`~rxpipe.engines.UNANSWERED_REASONS`); raises ValueError (or KeyError, TypeError) for
    fields that are not a result, e.g. a finish reason that is not a non-empty string."""
    reason = fields["finish_reason"]
    if not isinstance(reason, str) or not reason:
        raise ValueError(f"the finish reason {reason!r} is not one")
    return CompletionResult(str(fields["text"]), reason, int(fields["prompt_tokens"]),
                            int(fields["completion_tokens"]), float(fields["queue_time_s"]),
                            None if fields["ttft_s"] is None else float(fields["ttft_s"]), float(fields["e2e_s"]))


def cancel_payload(request_id: str, at_gateway_s: float) -> bytes:
    return orjson.dumps({"k": "cancel", "id": request_id, "g": at_gateway_s})


def credit_payload(credits: dict[str, int]) -> bytes:
    return orjson.dumps({"k": "credit", "c": credits})


def decode_control(raw: bytes) -> dict[str, Any] | None:
    """The control message, or None for a payload that is not one."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and data.get("k") in ("cancel", "credit") else None
