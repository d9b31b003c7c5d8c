"""Redis stream entries of the transport's messages (:mod:`rxpipe.transport._codec`): one field each.

A request entry (stream ``settings.stream``) has one field ``r``; a reply entry (stream
``reply_to``, one per gateway) one field ``m``; a control entry (stream ``<stream>:control``)
one field ``c``. Each field holds the orjson payload.
"""

from __future__ import annotations

from typing import Any

from ..errors import BackendError
from ..serving import CompletionRequest, CompletionResult, TokenChunk
from ..transport import _codec
from ..transport._codec import error_from_fields

__all__ = ["REQUEST_FIELD", "REPLY_FIELD", "CONTROL_FIELD", "encode_request", "decode_request", "start_message",
           "chunk_message", "done_message", "error_message", "error_from_fields", "decode_reply"]

REQUEST_FIELD = b"r"
REPLY_FIELD = b"m"
CONTROL_FIELD = b"c"


def encode_request(request: CompletionRequest, reply_to: str, now_loop_s: float) -> dict[bytes, bytes]:
    return {REQUEST_FIELD: _codec.encode_request(request, reply_to, now_loop_s)}


def decode_request(fields: dict[bytes, bytes]) -> dict[str, Any]:
    """The request's fields (raises ValueError for an entry that is not one of ours)."""
    raw = fields.get(REQUEST_FIELD)
    if raw is None:
        raise ValueError(f"stream entry without the {REQUEST_FIELD!r} field")
    return _codec.decode_request(raw)


def start_message(request_id: str, worker: str = "") -> dict[bytes, bytes]:
    return {REPLY_FIELD: _codec.start_payload(request_id, worker)}


def chunk_message(request_id: str, chunk: TokenChunk) -> dict[bytes, bytes]:
    return {REPLY_FIELD: _codec.chunk_payload(request_id, chunk)}


def done_message(request_id: str, result: CompletionResult) -> dict[bytes, bytes]:
    return {REPLY_FIELD: _codec.done_payload(request_id, result)}


def error_message(request_id: str, message: str, *, unavailable: bool,
                  backend: BackendError | None = None) -> dict[bytes, bytes]:
    """An error reply (``backend``: a backend's error passed on as it is; see
    :func:`rxpipe.transport._codec.error_payload`)."""
    return {REPLY_FIELD: _codec.error_payload(request_id, message, unavailable=unavailable, backend=backend)}


def decode_reply(fields: dict[bytes, bytes]) -> dict[str, Any] | None:
    """The reply message, or None for an entry that is not one (e.g. the stream's first entry)."""
    return _codec.decode_reply(fields.get(REPLY_FIELD))
