"""What every answer of the edge is made of: OpenAI's JSON error body, the headers every answer
carries, the access-log line, and the few helpers the handlers share (DESIGN §5)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from ..logs import ACCESS_LOG
from ..serving import Completion, CompletionRequest, CompletionResult
from ._credit import LLMD_DROPPED, SEEN, Credit, credit_headers
from ._metrics import TIME_TO_FIRST_TOKEN
from ._openai import error_body
from ._policy import Refusal, retry_after_headers
from ._server import new_request_id
from ._tenants import TENANT_HEADER

if TYPE_CHECKING:
    from ._edge import Edge


__all__ = ["ITEM", "RESULT", "RATELIMIT", "CREDIT", "ROUTER", "UNCOUNTED",
           "json_response", "error_response", "refusal_response", "result_of",
           "task_cancelled", "unauthorized", "model_not_found", "too_large", "retrieve", "observe_ttft", "unhandled",
           "clear_answer_state", "answer_headers", "access_line"]

log = logging.getLogger("rxpipe.gateway")


_JSON = "application/json"
#: the admitted request of the answer (None: refused before admission)
ITEM: web.RequestKey[CompletionRequest | None] = web.RequestKey("rxpipe_item", CompletionRequest)
#: the answer's result, for the access log (None: refused, or failed before one)
RESULT: web.RequestKey[CompletionResult | None] = web.RequestKey("rxpipe_result", CompletionResult)
#: OpenAI error ``type`` per refusal status; ``code`` carries the reason label (queue_full, ...).
_TYPES = {429: "rate_limit_error", 503: "overloaded_error"}
#: request-scoped store of the tenant's ``x-ratelimit-*`` headers, added to whatever answer goes out
#: (a typed key where aiohttp has them, 3.12+: a plain string key warns there)
_request_key = getattr(web, "RequestKey", None)
RATELIMIT: Any = _request_key("rxpipe_ratelimit_headers", dict) if _request_key else "rxpipe.ratelimit_headers"
#: the credit snapshot an answer's body already says (``GET /v1/credit``): its headers say the same
CREDIT: Any = _request_key("rxpipe_credit", Credit) if _request_key else "rxpipe.credit"
#: the calling router's id (``x-rxpipe-router-id``, None: none or not valid), and whether the
#: edge has still to count its call as decided (:meth:`CreditWatch.seen`)
ROUTER: Any = _request_key("rxpipe_router", str) if _request_key else "rxpipe.router"
UNCOUNTED: Any = _request_key("rxpipe_router_uncounted", bool) if _request_key else "rxpipe.router_uncounted"


def json_response(status: int, body: bytes, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=body, content_type=_JSON, headers=headers)


def error_response(status: int, message: str, type: str, code: str, param: str | None = None,
                   headers: dict[str, str] | None = None) -> web.Response:
    return json_response(status, error_body(message, type, code, param), headers)


def refusal_response(refusal: Refusal) -> web.Response:
    retry = refusal.status in _TYPES  # 429/503 say when; any other refusal is final
    headers = {**retry_after_headers(refusal.retry_after_s), LLMD_DROPPED: refusal.reason,
               **refusal.headers} if retry else refusal.headers
    return error_response(refusal.status, refusal.message, _TYPES.get(refusal.status, "invalid_request_error"),
                          refusal.code, refusal.param, headers=headers)


async def result_of(completion: Completion) -> CompletionResult:
    """The completion's result (raises the engine's error), without cancelling the Completion's
    shared result future when the awaiting handler is cancelled (the caller cancels the
    completion itself). Like ``asyncio.shield``, at the cost of one waiter future and none
    when the completion is already done."""
    future = completion.result
    if not future.done():
        waiter: asyncio.Future[None] = future.get_loop().create_future()

        def wake(_: object) -> None:
            if not waiter.done():
                waiter.set_result(None)

        future.add_done_callback(wake)
        try:
            await waiter
        finally:
            future.remove_done_callback(wake)
    return future.result()


def task_cancelled() -> bool:
    """True when the current task itself is being cancelled (the client disconnected), as
    opposed to an awaited future having been cancelled by someone else."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def unauthorized() -> web.Response:
    return error_response(401, "missing or invalid API key (Authorization: Bearer <key>)", "authentication_error",
                          "invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def model_not_found(model: str) -> web.Response:
    return error_response(404, f"model {model!r} does not exist; GET /v1/models lists the served models",
                          "not_found_error", "model_not_found", "model")


def too_large(limit: int) -> web.Response:
    return error_response(413, f"request body over the {limit}-byte limit", "invalid_request_error",
                          "request_too_large")


def retrieve(future: asyncio.Future[Completion]) -> None:
    """Mark a reply nobody waits for any more as retrieved (no "never retrieved" warning)."""
    if not future.cancelled():
        future.exception()


def observe_ttft(result: CompletionResult) -> None:
    if result.ttft_s is not None:
        TIME_TO_FIRST_TOKEN.observe(result.ttft_s)


def unhandled(request: web.Request, error: Exception) -> web.Response:
    """The JSON answer to an exception a handler let out: an aiohttp ``HTTPException`` of 4xx/5xx
    keeps its status (OpenAI's error body), anything else is a logged 500 ``internal_error``."""
    if isinstance(error, web.HTTPException) and error.status >= 400:
        kind = "invalid_request_error" if error.status < 500 else "server_error"
        return error_response(error.status, error.reason, kind, error.reason.lower().replace(" ", "_"))
    log.exception("unhandled error on %s %s", request.method, request.path, exc_info=error)
    return error_response(500, "internal error", "server_error", "internal_error")


def clear_answer_state(request: web.Request) -> None:
    """No admitted item and no ratelimit headers yet (set first, so reading them raises no
    KeyError: aiohttp's request mapping has only the ABC's exception-driven ``get``)."""
    request[ITEM] = None
    request[RESULT] = None
    request[RATELIMIT] = None
    request[CREDIT] = None
    request[ROUTER] = None
    request[UNCOUNTED] = False


def answer_headers(request: web.Request, response: web.StreamResponse, edge: Edge) -> None:
    """``x-request-id`` on every answer (streams too): the client's own, if sane, else a new one;
    the edge's credit as of now (:mod:`~rxpipe.gateway._credit`: ``x-rxpipe-free-slots``,
    ``-queue-room``, ``-drain-per-s``, llm-d's ``x-llm-d-flow-*``; a 429/503 also
    ``x-llm-d-request-dropped-reason``, its error code); ``x-rxpipe-cache`` when ``ops.cache``
    decided; a tenant's ``x-ratelimit-*`` headers (those a refusal set itself are fresher and
    kept); while the edge drains, ``Connection: close`` (RFC 9112 §9.6): the server closes the
    connection after this answer, so no client sends another request on it as the server stops.
    Call before the status line goes out."""
    if edge.draining:
        response.force_close()
    headers = response.headers
    status = response.status
    dropped = None
    if (status == 429 or status == 503) and LLMD_DROPPED not in headers:
        dropped = _error_code(response) or ("queue_full" if status == 429 else "unavailable")
    credit = request[CREDIT]
    headers.update(credit_headers(credit if credit is not None else edge.credit(edge.loop_time()), dropped))
    router = request[ROUTER]
    if router is not None:
        seen = edge.credit_watch.seen_of(router)
        if seen is not None:
            headers[SEEN] = str(seen)
    item = request[ITEM]
    headers["x-request-id"] = new_request_id(request.headers.get("x-request-id"), item.id if item is not None else None)
    if item is not None and item.cache is not None:
        headers["x-rxpipe-cache"] = item.cache
    ratelimit = request[RATELIMIT]
    if ratelimit:
        for name, value in ratelimit.items():
            headers.setdefault(name, value)


def _error_code(response: web.StreamResponse) -> str | None:
    """The ``error.code`` (or ``status``) of a JSON answer's body, if it has one."""
    body = response.body if isinstance(response, web.Response) else None
    if not body:
        return None
    try:
        decoded = orjson.loads(body)  # type: ignore[arg-type]
    except orjson.JSONDecodeError:
        return None
    if not isinstance(decoded, dict):
        return None
    error = decoded.get("error")
    code = error.get("code") if isinstance(error, dict) else decoded.get("status")
    return code if isinstance(code, str) else None


def access_line(edge: Edge, request: web.Request, route: str, response: web.StreamResponse | None,
                elapsed_s: float) -> None:
    """One access-log line (logger ``rxpipe.access``): status, the refusal or error code,
    tenant, token counts, queue and total time, request id, never a key or a prompt.
    ``response`` None: the client closed the request before its answer was complete, logged
    as status 499 (nginx's "client closed request"), with what was known of it by then."""
    if not ACCESS_LOG.isEnabledFor(logging.INFO):
        return
    item: CompletionRequest | None = request[ITEM]
    result: CompletionResult | None = request[RESULT]
    tenant = item.tenant if item is not None else None
    tenancy = edge.tenancy
    if tenant is None and tenancy is not None:
        key_id = edge.keys.authenticate(request.headers.get("Authorization"))
        if key_id is not None:
            tenant = tenancy.tenant_of(edge.keys, key_id, request.headers.get(TENANT_HEADER))
    status = 499 if response is None else response.status
    code = None
    if response is not None and status >= 400 and isinstance(response, web.Response) and response.body:
        try:
            code = orjson.loads(response.body)["error"]["code"]  # type: ignore[arg-type]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            code = None
    fields: dict[str, Any] = {
        "method": request.method, "route": route, "status": status, "code": code, "tenant": tenant,
        "stream": item.stream if item is not None else None,
        "prompt_tokens": result.prompt_tokens if result is not None else None,
        "completion_tokens": result.completion_tokens if result is not None else None,
        "finish_reason": result.finish_reason if result is not None else None,
        "queue_s": round(result.queue_time_s, 6) if result is not None else None,
        "total_s": round(elapsed_s, 6),
        "request_id": response.headers.get("x-request-id") if response is not None else new_request_id(
            request.headers.get("x-request-id"), item.id if item is not None else None),
    }
    ACCESS_LOG.info("%s %s %d", request.method, route, status, extra={"fields": fields})
