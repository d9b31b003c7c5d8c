"""aiohttp handlers of the edge: OpenAI endpoints, SSE with credit, health, metrics, and the
dispatch on (method, path) that aiohttp's low-level server calls (``_server.EdgeRunner``)."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import HttpVersion11, web
from aiohttp.http_exceptions import ContentEncodingError
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from ..engines import Completion, CompletionRequest, CompletionResult
from ..errors import BackendError, DroppedError, EngineError, EngineUnavailableError, UnsupportedRequestError
from ..logs import ACCESS_LOG
from ._metrics import REQUEST_DURATION, TIME_TO_FIRST_TOKEN, count_request
from ._openai import (
    SSE_DONE,
    InvalidRequest,
    chunk_body,
    completion_body,
    error_body,
    now_created,
    parse_request,
    sse,
    token_event_template,
)
from ._policy import Refusal, retry_after_headers
from ._server import HTTP_LOG, EdgeApp, new_request_id
from ._sse import EventWriter, bound_socket_buffers, stream_error
from ._tenants import TENANT_HEADER

if TYPE_CHECKING:
    from ._gateway import Gateway

__all__ = ["make_app", "HTTP_LOG"]

log = logging.getLogger("rxpipe.gateway")


_JSON = "application/json"
_ITEM: web.RequestKey[CompletionRequest | None] = web.RequestKey("rxpipe_item", CompletionRequest)
#: the answer's result, for the access log (None: refused, or failed before one)
_RESULT: web.RequestKey[CompletionResult | None] = web.RequestKey("rxpipe_result", CompletionResult)
_COMPLETIONS, _CHAT, _MODELS = "/v1/completions", "/v1/chat/completions", "/v1/models"
#: ``/v1/models/{model}``: one path segment (aiohttp's ``{model}`` pattern, ``[^{}/]+``) of the
#: percent-encoded path (``URL.path_safe``: an encoded ``/`` stays ``%2F``)
_MODEL_PATH = re.compile(r"/v1/models/[^{}/]+")
#: the methods a GET route answers (aiohttp's ``add_get``: HEAD too)
_GET = ("GET", "HEAD")
#: the fixed paths the edge serves: an answer on one of them is counted under its path (a 405
#: too), any other under "other" (the route label stays a bounded set)
_ROUTES = frozenset({_COMPLETIONS, _CHAT, "/v1/models", "/metrics", "/health", "/healthz", "/readyz"})
#: OpenAI error ``type`` per refusal status; ``code`` carries the reason label (queue_full, ...).
_TYPES = {429: "rate_limit_error", 503: "overloaded_error"}
#: request-scoped store of the tenant's ``x-ratelimit-*`` headers, added to whatever answer goes out
#: (a typed key where aiohttp has them, 3.12+: a plain string key warns there)
_request_key = getattr(web, "RequestKey", None)
_RATELIMIT: Any = _request_key("rxpipe_ratelimit_headers", dict) if _request_key else "rxpipe.ratelimit_headers"


def _json(status: int, body: bytes, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=body, content_type=_JSON, headers=headers)


def _error(status: int, message: str, type: str, code: str, param: str | None = None,
           headers: dict[str, str] | None = None) -> web.Response:
    return _json(status, error_body(message, type, code, param), headers)


def _refusal_response(refusal: Refusal) -> web.Response:
    retry = refusal.status in _TYPES  # 429/503 say when; any other refusal is final
    headers = {**retry_after_headers(refusal.retry_after_s), **refusal.headers} if retry else refusal.headers
    return _error(refusal.status, refusal.message, _TYPES.get(refusal.status, "invalid_request_error"), refusal.code,
                  refusal.param, headers=headers)


class _Edge:
    """Handlers bound to one Gateway."""

    def __init__(self, gateway: Gateway, loop: asyncio.AbstractEventLoop) -> None:
        self.gateway = gateway
        self.config = gateway.config
        #: the loop serving the app (``asyncio.get_running_loop()`` costs a getpid() syscall per
        #: call on Python < 3.12: the hot path reads this instead)
        self.loop = loop

    # -- OpenAI endpoints ----------------------------------------------------------------------
    async def serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        """``POST /v1/completions`` (``chat=False``) and ``/v1/chat/completions`` (``chat=True``):
        the answer, counted by route and code and timed. The edge runs no aiohttp middleware and
        no response signal (each costs coroutine layers on every request): this is the one
        wrapper of the completion routes, and :func:`_answer_headers` sets the headers every
        answer carries."""
        started = time.perf_counter()
        route = _CHAT if chat else _COMPLETIONS
        _clear_answer_state(request)
        try:
            response = await self._complete(request, chat=chat)
        except asyncio.CancelledError:
            count_request(route, 499)  # client closed the request (nginx's convention)
            if self.gateway.access_log:
                self._access(request, route, None, time.perf_counter() - started)
            raise
        except Exception as error:
            response = _unhandled(request, error)
        count_request(route, response.status)
        elapsed = time.perf_counter() - started
        REQUEST_DURATION.observe(elapsed)
        if not response.prepared:  # a stream set its headers before its status line went out
            _answer_headers(request, response, self.gateway.draining)
        if self.gateway.access_log:
            self._access(request, route, response, elapsed)
        return response

    def _access(self, request: web.Request, route: str, response: web.StreamResponse | None,
                elapsed_s: float) -> None:
        """One access-log line (logger ``rxpipe.access``): status, the refusal or error code,
        tenant, token counts, queue and total time, request id, never a key or a prompt.
        ``response`` None: the client closed the request before its answer was complete, logged
        as status 499 (nginx's "client closed request"), with what was known of it by then."""
        if not ACCESS_LOG.isEnabledFor(logging.INFO):
            return
        item: CompletionRequest | None = request[_ITEM]
        result: CompletionResult | None = request[_RESULT]
        tenant = item.tenant if item is not None else None
        if tenant is None and self.gateway.tenant_gate is not None:
            key_id = self.gateway.authenticate(request.headers.get("Authorization"))
            if key_id is not None:
                tenant = self.gateway.tenant_of(key_id, request.headers.get(TENANT_HEADER))
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

    def _model(self) -> dict[str, object]:
        return {"id": self.config.model, "object": "model", "created": 0, "owned_by": "rxpipe"}

    async def models(self, request: web.Request) -> web.Response:
        if self.gateway.authenticate(request.headers.get("Authorization")) is None:
            return _unauthorized()
        return _json(200, orjson.dumps({"object": "list", "data": [self._model()]}))

    async def model(self, request: web.Request) -> web.Response:
        """``GET /v1/models/{model}`` (the dispatch sends only paths :data:`_MODEL_PATH` matches)."""
        if self.gateway.authenticate(request.headers.get("Authorization")) is None:
            return _unauthorized()
        model = _unquote_path_safe(request.rel_url.path_safe[len(_MODELS) + 1:])
        if model != self.config.model:
            return _model_not_found(model)
        return _json(200, orjson.dumps(self._model()))

    async def _complete(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        gateway = self.gateway
        loop = self.loop
        now = loop.time()
        key_id = gateway.authenticate(request.headers.get("Authorization"))
        if key_id is None:
            return _unauthorized()
        tenant = None
        if gateway.tenant_gate is not None:  # one tenant: no per-request cost
            tenant = gateway.tenant_of(key_id, request.headers.get(TENANT_HEADER))
            request[_RATELIMIT] = gateway.ratelimit_headers(tenant)
        refusal = gateway.early_refusal(now)
        if refusal is not None:
            return self._refuse(refusal, tenant)
        limit = self.config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return _too_large(limit)
        waited = False
        try:
            if request.content.is_eof():
                # The whole body came with the headers (the usual case): reading it cannot
                # wait, so there is no deadline to watch and no timer to arm.
                body = await request.read()
            else:
                waited = True
                async with asyncio.timeout(self.config.body_timeout_s):
                    body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _too_large(limit)
        except web.RequestPayloadError as error:  # the body does not decode: the client's fault
            if isinstance(error.__cause__, ContentEncodingError):
                bad = _error(400, "the request body does not decode with its Content-Encoding",
                             "invalid_request_error", "invalid_content_encoding")
            else:
                bad = _error(400, "the request body is malformed (its framing or length is wrong)",
                             "invalid_request_error", "invalid_body")
            bad.force_close()  # what is left of the body cannot be parsed: close after answering
            return bad
        except TimeoutError:
            return _error(408, f"the request body did not arrive within {self.config.body_timeout_s:g} s",
                          "invalid_request_error", "request_timeout")
        try:
            item = parse_request(body, chat=chat, default_model=self.config.model,
                                 max_tokens_limit=self.config.max_tokens_limit,
                                 max_model_len=self.config.max_model_len,
                                 default_max_tokens=self.config.default_max_tokens)
        except InvalidRequest as error:
            return _error(error.status, str(error), error.type, error.code, error.param)
        if item.model != self.config.model:
            return _model_not_found(item.model)
        item.api_key_id = key_id
        item.tenant = tenant
        if waited:  # the edge may have changed while the body arrived: check it again
            now = loop.time()
            refusal = gateway.policy_refusal(key_id, now) or gateway.early_refusal(now)
        else:  # nothing ran since the first check (no await suspended): only the policy is new
            refusal = gateway.policy_refusal(key_id, now)
        if refusal is not None:
            return self._refuse(refusal, tenant)
        refusal = gateway.admit(item, now)  # counts its own refusals per tenant
        if refusal is not None:
            return self._refuse(refusal)
        if tenant is not None:
            request[_RATELIMIT] = gateway.admitted_headers(item)
        try:
            return await self._answer(request, item, chat=chat)
        finally:
            gateway.leave(item)

    def _refuse(self, refusal: Refusal, tenant: str | None = None) -> web.Response:
        """Count ``refusal`` (per tenant too, given its tenant) and answer it."""
        self.gateway.reject(refusal)
        self.gateway.count_refusal(tenant, refusal.reason)
        return _refusal_response(refusal)

    def _unavailable(self, item: CompletionRequest, error: BaseException) -> web.Response:
        """503 ``unavailable`` for an admitted request the engine could not serve. The detail
        (a backend's address, say) goes to the log, never to the client."""
        log.debug("request %s: engine unavailable: %s", item.id, error)
        return self._refuse(Refusal(503, "unavailable", self.gateway.retry_after_queue(),
                                    "the model backend is unavailable; retry after the indicated delay"),
                            item.tenant)

    def _failed(self, item: CompletionRequest, error: EngineError) -> web.Response:
        """The answer to a request the engine failed before any token went out: 503 with
        Retry-After when it is unavailable; a backend's error as the engine mapped it (its 4xx
        with its message, else 502/504: :class:`~rxpipe.engines.BackendError`); 400 for a request
        the engine cannot serve (:class:`~rxpipe.errors.UnsupportedRequestError`); else 500."""
        if isinstance(error, EngineUnavailableError):
            return self._unavailable(item, error)
        if isinstance(error, UnsupportedRequestError):  # the request's shape: the client's fault
            log.debug("request %s: %s", item.id, error)
            return _error(400, error.client_message, "invalid_request_error", "unsupported_request")
        if isinstance(error, BackendError):
            # a client's 4xx is no incident: the log says it at DEBUG (the access log has the status)
            log.log(logging.DEBUG if error.client_fault else logging.WARNING, "request %s: %s", item.id, error)
            return _error(error.status, error.client_message, error.type, error.code or "backend_error", error.param)
        log.warning("request %s failed in the engine: %r", item.id, error)
        return _error(500, "the model backend failed the request", "server_error", "engine_error")

    def _stopped_response(self, reason: str, tenant: str | None) -> web.Response:
        """The request was admitted, then cut off by the edge itself: draining past its timeout,
        or the graph behind it stopped."""
        if self.gateway.draining:
            return self._refuse(Refusal(503, "draining", self.config.retry_after_min_s,
                                        "the server shut down before the request finished; retry elsewhere"), tenant)
        return self._refuse(Refusal(503, "unavailable", self.gateway.retry_after_queue(), reason), tenant)

    async def _answer(self, request: web.Request, item: CompletionRequest, *, chat: bool) -> web.StreamResponse:
        gateway = self.gateway
        loop = self.loop
        reply = item.reply
        assert reply is not None
        request[_ITEM] = item  # for the answer's x-rxpipe-cache header (ops.cache)
        # The handler wakes once: when the answer can be written (a stream: at its start; else
        # when its result is ready, or it never started). The start is recorded by a callback
        # the moment the reply settles, so waking later does not move it.
        settled: asyncio.Future[None] = loop.create_future()
        started = False

        def on_result(_: object) -> None:
            if not settled.done():
                settled.set_result(None)

        def on_reply(reply: asyncio.Future[Completion]) -> None:
            nonlocal started
            if reply.cancelled() or reply.exception() is not None:
                on_result(None)
                return
            completion = reply.result()
            started = True
            gateway.started(item, completion, loop.time())
            if item.stream:
                on_result(None)
            else:
                completion.result.add_done_callback(on_result)

        reply.add_done_callback(on_reply)
        try:
            try:
                await settled
                completion: Completion = await reply  # settled: returns or raises at once
            except asyncio.CancelledError:
                if _task_cancelled():
                    raise  # the client left
                return self._stopped_response("the request was cancelled before it started", item.tenant)
            except DroppedError as error:  # shed by an overflow strategy, or its stage failed
                return self._refuse(Refusal(429, "queue_full", gateway.retry_after_queue(),
                                            f"the server shed the request ({error.reason}); retry later"), item.tenant)
            except EngineUnavailableError as error:
                return self._unavailable(item, error)
            if completion.finish_reason == "deadline":
                # Queued past its latency budget: it never ran. Refuse it like an early deadline.
                return self._refuse(Refusal(429, "deadline", self.config.retry_after_min_s,
                                            "the request waited longer than the latency budget and was not started"),
                                    item.tenant)
            if item.stream:
                return await self._stream(request, item, completion, chat=chat)
            try:
                result = await _result_of(completion)  # done already: no wait
            except EngineUnavailableError as error:
                return self._unavailable(item, error)
            request[_RESULT] = result
            if result.finish_reason == "cancelled":
                return self._stopped_response("the request was cancelled while running", item.tenant)
            _observe(result)
            self.gateway.meter.record_service(result.e2e_s - result.queue_time_s)
            return _json(200, completion_body(item, result, chat=chat, created=now_created()))
        except asyncio.CancelledError:
            item.cancel()  # the client left: a queued request never starts, a running one stops
            reply.add_done_callback(_retrieve)
            raise
        except EngineError as error:
            return self._failed(item, error)
        finally:
            if not started:
                reply.remove_done_callback(on_reply)
                if reply.done() and not reply.cancelled() and reply.exception() is None:
                    on_reply(reply)  # it started before its callback ran (the client left meanwhile)
                else:
                    gateway.meter.record_abandon(loop.time())

    async def _stream(self, request: web.Request, item: CompletionRequest, completion: Completion, *,
                      chat: bool) -> web.StreamResponse:
        response = web.StreamResponse(status=200, headers={
            "Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        # Subscribe before the first await, so the sequence has its credit for the first step.
        created = now_created()
        writer = EventWriter(self.loop, self.config.stream_window,
                              *token_event_template(item, chat=chat, created=created),
                              flush_bytes=self.config.stream_buffer_bytes)
        completion.tokens.subscribe(writer)
        result_future = completion.result
        transport = request.transport

        def abort_if_stalled(future: asyncio.Future[CompletionResult]) -> None:
            # A reader that stopped reading leaves our write blocked: once the engine gave up on
            # the sequence, close the connection instead of waiting for the socket forever.
            if not future.cancelled() and future.exception() is None and future.result().finish_reason == "stalled":
                if transport is not None:
                    transport.abort()

        result_future.add_done_callback(abort_if_stalled)
        try:
            # The status line waits for the first token (or the end): a backend that refuses the
            # request (its 4xx, a 503) gets its own status to the client, not a 200 then an error event.
            while not writer.pending and not writer.done:
                await writer.wait()
            if not writer.pending and isinstance(writer.error, EngineError):
                return self._failed(item, writer.error)
            bound_socket_buffers(request, self.config.stream_buffer_bytes)
            _answer_headers(request, response, self.gateway.draining)
            await response.prepare(request)
            try:
                if chat:
                    await response.write(sse(chunk_body(item, chat=True, created=created, text="", role=True)))
                pending = writer.pending
                while True:
                    if pending:
                        # What arrived while the writer could not write itself (before this
                        # point, during this task's own write, or while the socket is over its
                        # high-water mark): one write of whole events, then as much credit back.
                        n = len(pending)
                        data = b"".join(pending)
                        pending.clear()
                        await response.write(data)
                        if request.protocol is not None and request.protocol.writing_paused:
                            # aiohttp drains only past 64 KiB of its own: wait for the socket here,
                            # so a slow reader holds at most stream_buffer_bytes (plus this write)
                            await request.protocol._drain_helper()
                        writer.grant(n)
                        continue
                    if writer.broken:
                        raise ConnectionResetError("the client connection closed mid-stream")
                    if writer.done:
                        break
                    writer.go_live(response, request)
                    await writer.wait()
                if writer.error is not None:
                    raise writer.error
                result = await _result_of(completion)
            except EngineError as error:
                # The status line is sent: the failure goes in the stream, as an error event
                # (its detail only in the log: it may name the backend).
                log.warning("request %s failed in the engine mid-stream: %r", item.id, error)
                if isinstance(error, BackendError):
                    await stream_error(response, error.client_message, error.type, error.code or "backend_error")
                else:
                    unavailable = isinstance(error, EngineUnavailableError)
                    await stream_error(response, "the model backend is unavailable" if unavailable
                                       else "the model backend failed the request", "server_error",
                                       "unavailable" if unavailable else "engine_error")
                return response
            request[_RESULT] = result
            if result.finish_reason == "cancelled":
                reason = "draining" if self.gateway.draining else "unavailable"
                await stream_error(response, "the request was cancelled by the server", "overloaded_error", reason)
                return response
            _observe(result)
            self.gateway.meter.record_service(result.e2e_s - result.queue_time_s)
            # the final chunk, the usage chunk and [DONE] end the stream in one write
            tail = sse(chunk_body(item, chat=chat, created=created, result=result))
            if item.sampling.get("include_usage"):
                tail += sse(chunk_body(item, chat=chat, created=created, result=result, usage_only=True))
            await response.write_eof(tail + SSE_DONE)
        except (ConnectionResetError, ConnectionError):
            completion.cancel()  # the client went away mid-stream: free the slot
        finally:
            writer.cancel()
            result_future.remove_done_callback(abort_if_stalled)
        return response

    # -- operational endpoints -----------------------------------------------------------------
    async def healthz(self, request: web.Request) -> web.Response:
        return _json(200, b'{"status":"ok"}')

    async def readyz(self, request: web.Request) -> web.Response:
        gateway = self.gateway
        if gateway.draining:
            return _json(503, b'{"status":"draining"}', {"Retry-After": "1"})
        if not gateway.available:
            return _json(503, b'{"status":"unavailable"}', {"Retry-After": "1"})
        return _json(200, b'{"status":"ready"}')

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _result_of(completion: Completion) -> CompletionResult:
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


def _task_cancelled() -> bool:
    """True when the current task itself is being cancelled (the client disconnected), as
    opposed to an awaited future having been cancelled by someone else."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _unauthorized() -> web.Response:
    return _error(401, "missing or invalid API key (Authorization: Bearer <key>)", "authentication_error",
                  "invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def _model_not_found(model: str) -> web.Response:
    return _error(404, f"model {model!r} does not exist; GET /v1/models lists the served models",
                  "not_found_error", "model_not_found", "model")


def _too_large(limit: int) -> web.Response:
    return _error(413, f"request body over the {limit}-byte limit", "invalid_request_error", "request_too_large")


def _retrieve(future: asyncio.Future[Completion]) -> None:
    """Mark a reply nobody waits for any more as retrieved (no "never retrieved" warning)."""
    if not future.cancelled():
        future.exception()


def _observe(result: CompletionResult) -> None:
    if result.ttft_s is not None:
        TIME_TO_FIRST_TOKEN.observe(result.ttft_s)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _unhandled(request: web.Request, error: Exception) -> web.Response:
    """The JSON answer to an exception a handler let out: an aiohttp ``HTTPException`` of 4xx/5xx
    keeps its status (OpenAI's error body), anything else is a logged 500 ``internal_error``."""
    if isinstance(error, web.HTTPException) and error.status >= 400:
        kind = "invalid_request_error" if error.status < 500 else "server_error"
        return _error(error.status, error.reason, kind, error.reason.lower().replace(" ", "_"))
    log.exception("unhandled error on %s %s", request.method, request.path, exc_info=error)
    return _error(500, "internal error", "server_error", "internal_error")


def _clear_answer_state(request: web.Request) -> None:
    """No admitted item and no ratelimit headers yet (set first, so reading them raises no
    KeyError: aiohttp's request mapping has only the ABC's exception-driven ``get``)."""
    request[_ITEM] = None
    request[_RESULT] = None
    request[_RATELIMIT] = None


def _answer_headers(request: web.Request, response: web.StreamResponse, draining: bool) -> None:
    """``x-request-id`` on every answer (streams too): the client's own, if sane, else a new one;
    ``x-rxpipe-cache`` when ``ops.cache`` decided; a tenant's ``x-ratelimit-*`` headers (those a
    refusal set itself are fresher and kept); while ``draining``, ``Connection: close`` (RFC 9112
    §9.6): the server closes the connection after this answer, so no client sends another request
    on it as the server stops. Call before the status line goes out."""
    if draining:
        response.force_close()
    headers = response.headers
    item = request[_ITEM]
    headers["x-request-id"] = new_request_id(request.headers.get("x-request-id"), item.id if item is not None else None)
    if item is not None and item.cache is not None:
        headers["x-rxpipe-cache"] = item.cache
    ratelimit = request[_RATELIMIT]
    if ratelimit:
        for name, value in ratelimit.items():
            headers.setdefault(name, value)


def _operational(gateway: Gateway, route: str, handler: Handler) -> Handler:
    """``handler`` of an operational route, counted by route and code, with the answer headers."""

    async def counted(request: web.Request) -> web.StreamResponse:
        _clear_answer_state(request)
        try:
            response = await handler(request)
        except asyncio.CancelledError:
            count_request(route, 499)
            raise
        except Exception as error:
            response = _unhandled(request, error)
        count_request(route, response.status)
        _answer_headers(request, response, gateway.draining)
        return response

    return counted


def _unrouted(gateway: Gateway, request: web.Request, allowed: Iterable[str]) -> web.Response:
    """OpenAI's JSON error body for a path no route serves (404 ``unknown_route``) or a method
    the path's route does not take (405 ``method_not_allowed``, with ``Allow``: the ``allowed``
    methods), counted under the path if it is one of :data:`_ROUTES`, else "other"."""
    _clear_answer_state(request)
    if allowed:
        response = _error(405, f"{request.method} is not allowed on {request.path}", "invalid_request_error",
                          "method_not_allowed", headers={"Allow": ",".join(sorted(allowed))})
    else:
        response = _error(404, f"no route {request.method} {request.path}", "not_found_error", "unknown_route")
    count_request(request.path if request.path in _ROUTES else "other", response.status)
    _answer_headers(request, response, gateway.draining)
    return response


async def _expect(gateway: Gateway, request: web.Request) -> web.Response | None:
    """RFC 9110 §10.1.1 ``Expect``, as aiohttp's router does it: ``100-continue`` on HTTP/1.1
    gets ``100 Continue`` written at once (the client then sends its body; None: the route
    answers); any other expectation, or one on HTTP/1.0, is refused with 417
    ``expectation_failed`` (OpenAI's JSON error body, counted like any answer)."""
    expect = request.headers.get("Expect", "")
    if request.version == HttpVersion11 and expect.lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's own status line is still to be written
        await request.writer.drain()
        return None
    _clear_answer_state(request)
    response = _error(417, f"unknown Expect: {expect[:100]}", "invalid_request_error", "expectation_failed")
    count_request(request.path if request.path in _ROUTES else "other", response.status)
    _answer_headers(request, response, gateway.draining)
    return response


def _unquote_path_safe(value: str) -> str:
    """A path segment of ``URL.path_safe`` decoded as aiohttp decodes a route's match
    (``web_urldispatcher._unquote_path_safe``: ``%2F`` and ``%25``, the rest is decoded already)."""
    if "%" not in value:
        return value
    return value.replace("%2F", "/").replace("%25", "%")


def make_app(gateway: Gateway, loop: asyncio.AbstractEventLoop) -> EdgeApp:
    """The edge on ``loop``: one handler for aiohttp's low-level server that dispatches on
    (method, percent-encoded path) to the routes of :class:`Gateway` (no router, no middleware),
    and the body limit ``config.max_body_bytes``.

    Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``; ``GET`` (and ``HEAD``)
    ``/v1/models``, ``/v1/models/{model}``, ``/metrics``, ``/health``, ``/healthz``, ``/readyz``.
    Anything else: 404 ``unknown_route``, or 405 ``method_not_allowed`` with ``Allow`` on a known
    path (:func:`_unrouted`). A request with ``Expect`` is answered as :func:`_expect` says."""
    edge = _Edge(gateway, loop)
    by_path: dict[str, dict[str, Handler]] = {
        # partials of one coroutine function: called straight, no wrapper layer
        _COMPLETIONS: {"POST": functools.partial(edge.serve, chat=False)},
        _CHAT: {"POST": functools.partial(edge.serve, chat=True)},
    }
    for path, handler in ((_MODELS, edge.models), ("/metrics", edge.metrics),
                          ("/health", edge.healthz),  # vLLM's name for the liveness probe
                          ("/healthz", edge.healthz), ("/readyz", edge.readyz)):
        by_path[path] = dict.fromkeys(_GET, _operational(gateway, path, handler))
    one_model = dict.fromkeys(_GET, _operational(gateway, "other", edge.model))
    routes = {(method, path): handler for path, methods in by_path.items() for method, handler in methods.items()}

    async def dispatch(request: web.Request) -> web.StreamResponse:
        path = request.rel_url.path_safe
        handler = routes.get((request.method, path))
        if handler is None:
            methods = by_path.get(path)
            if methods is None and _MODEL_PATH.fullmatch(path):
                methods = one_model
            handler = methods.get(request.method) if methods is not None else None
            if handler is None:
                return _unrouted(gateway, request, methods or ())
        if "Expect" in request.headers:
            refused = await _expect(gateway, request)
            if refused is not None:
                return refused
        return await handler(request)

    return EdgeApp(dispatch, gateway.config.max_body_bytes)
