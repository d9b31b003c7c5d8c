"""A backend's error answer, as the client of the gateway sees it (DESIGN §4; the manual's
"Many backends", docs/tutorials/backends.md).

The mapping (:func:`client_status`), one row per backend answer:

============================  ==========================================================
backend answers               the client gets
============================  ==========================================================
400, 404, 409, 413, 422, ...  the same status, the backend's message (addresses removed)
401, 403, 407                 502 ``backend_auth_error``: the gateway's credentials, not
                              the client's, were refused
408                           502 ``backend_error``: the backend timed out reading us
429, 503                      retried after its Retry-After; then (or at once, when the
                              wait is over ``retry_after_cap_s``) 503 ``unavailable``
                              with Retry-After (the engine, not this module)
500, 501, 502, 504, other 5xx 502 ``backend_error``
a 2xx that is no OpenAI       502 ``backend_error`` (:func:`broken_answer`)
answer, or breaks off
no answer within              504 ``backend_timeout``
``total_timeout_s`` after
its headers
connection refused, reset,    503 ``unavailable`` with Retry-After (the circuit breaker
no headers in time            counts it; the engine, not this module)
============================  ==========================================================

The message a client sees is the backend's own OpenAI error message (``error.message``; also
FastAPI's ``detail``), with every URL, IP address, host:port, file path and traceback removed
and at most :data:`MAX_MESSAGE_CHARS` characters; a body with no message (an HTML page, say)
gives a generic one naming the status. The full answer goes to the log, never to the client.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import orjson

from ..errors import BackendError

__all__ = ["backend_error", "broken_answer", "client_status", "client_message", "MAX_MESSAGE_CHARS"]

#: longest message passed on to a client (characters)
MAX_MESSAGE_CHARS = 1000

#: backend statuses that say the *gateway* is at fault (its key, its proxy, its reading)
_GATEWAY_FAULT = {401: "backend_auth_error", 403: "backend_auth_error", 407: "backend_auth_error",
                  408: "backend_error"}
_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")
_REMOVED = "(address removed)"
#: what never reaches a client: URLs, [IPv6]:port, IPv4[:port], localhost[:port], absolute paths
_ADDRESSES = [
    re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://\S+"),
    re.compile(r"\[[0-9a-fA-F:.]+\](?::\d+)?"),
    re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+)?\b"),
    re.compile(r"\blocalhost(?::\d+)?\b", re.I),
    re.compile(r"(?<![\w.])(?:/[\w.\-]+){2,}/?"),
]
_TRACEBACK = re.compile(r"Traceback \(most recent call last\).*", re.S)


def client_status(backend_status: int) -> tuple[int, str | None]:
    """``(status for the client, code)`` of a backend's error status (not 429/503: those are
    throttling, see the table above). The code is None where the backend's own applies."""
    if backend_status in _GATEWAY_FAULT:
        return 502, _GATEWAY_FAULT[backend_status]
    if 400 <= backend_status < 500:
        return backend_status, None
    return 502, "backend_error"


def client_message(message: str, hosts: tuple[str, ...] = ()) -> str:
    """``message`` without addresses (URLs, IPs, host:port, ``hosts``), file paths and
    tracebacks, whitespace folded, cut at :data:`MAX_MESSAGE_CHARS`."""
    text = _TRACEBACK.sub("", message)
    for pattern in _ADDRESSES:
        text = pattern.sub(_REMOVED, text)
    for host in hosts:
        if host:
            text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?::\d+)?(?![\w-])", _REMOVED, text, flags=re.I)
    text = " ".join(text.split())
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[:MAX_MESSAGE_CHARS - 1] + "…"
    return text


def _message_of(data: Any) -> tuple[str | None, Any, Any, Any]:
    """``(message, type, code, param)`` of an error document: OpenAI's ``{"error": {...}}``,
    ``{"error": "text"}``, ``{"message": ...}`` or FastAPI's ``{"detail": "text" | [{"loc",
    "msg"}, ...]}``."""
    if not isinstance(data, dict):
        return None, None, None, None
    error = data.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        return (message if isinstance(message, str) else None, error.get("type"), error.get("code"),
                error.get("param"))
    if isinstance(error, str):
        return error, None, data.get("code"), None
    if isinstance(data.get("message"), str):
        return data["message"], data.get("type"), data.get("code"), data.get("param")
    detail = data.get("detail")
    if isinstance(detail, str):
        return detail, None, None, None
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict) and isinstance(item.get("msg"), str):
                where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
                parts.append(f"{where}: {item['msg']}" if where else item["msg"])
        return ("; ".join(parts) or None), None, None, None
    return None, None, None, None


def backend_error(status: int, body: bytes, content_type: str, url: str, request_id: str) -> BackendError:
    """The :class:`~rxpipe.BackendError` for a backend's non-2xx answer (not 429/503) to
    ``request_id``: the client's status and OpenAI error body by the table above; ``str()`` of it
    (for the log) keeps the backend's URL and whole message."""
    data: Any = None
    if body:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
    message, kind, code, param = _message_of(data)
    if message is None and data is None and "html" not in content_type and body:
        message = body.decode("utf-8", "replace")  # a plain-text error
    logged = message if message is not None else body[:200].decode("utf-8", "replace")
    client, own_code = client_status(status)
    host = urlsplit(url).hostname or ""
    shown = client_message(message or "", (host,)) if client < 500 else ""
    if not shown:
        shown = (f"the model backend refused the request (HTTP {status})" if client < 500
                 else f"the model backend refused the gateway's own credentials (HTTP {status}); "
                      f"not a fault of this request" if own_code == "backend_auth_error"
                 else f"the model backend failed the request (HTTP {status})")
    if own_code is not None:
        kind, code, param = "server_error", own_code, None
    else:
        kind = "not_found_error" if client == 404 else "invalid_request_error"
        code = code if isinstance(code, str) and _IDENTIFIER.fullmatch(code) else f"backend_{status}"
        param = param if isinstance(param, str) and _IDENTIFIER.fullmatch(param) else None
    return BackendError(f"{url} answered {status} to {request_id}: {logged}", status=client, backend_status=status,
                        client_message=shown, type=kind, code=code, param=param)


def broken_answer(message: str, *, timeout: bool = False) -> BackendError:
    """A backend's answer that failed after its status line: not an OpenAI answer, cut off, or
    (``timeout``) not finished within ``total_timeout_s`` — 502 ``backend_error`` or 504
    ``backend_timeout`` for the client; ``message`` (with the backend's address) for the log."""
    if timeout:
        return BackendError(message, status=504, backend_status=200, type="server_error", code="backend_timeout",
                            client_message="the model backend did not finish the answer in time")
    return BackendError(message, status=502, backend_status=200, type="server_error", code="backend_error",
                        client_message="the model backend sent a broken or malformed answer")
