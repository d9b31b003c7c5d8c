"""The model routes of the edge: ``POST /v1/completions``, ``POST /v1/chat/completions``,
``POST /v1/embeddings`` and ``POST /v1/responses`` (DESIGN §5): authenticate, refuse early, read
and check the body, refuse what the engine cannot serve, admit into the graph by its demand,
then answer — JSON, or an SSE stream (:func:`~rxpipe.gateway._sse.stream_answer`)."""

from __future__ import annotations

import asyncio
import logging
import time

import orjson
from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError

from ..errors import BackendError, DroppedError, EngineError, EngineUnavailableError, UnsupportedRequestError
from ..serving import UNANSWERED_REASONS, Completion, CompletionRequest
from ._credit import ROUTER_ID, router_id
from ._edge import Edge
from ._metrics import REQUEST_DURATION, count_request
from ._openai import (
    InvalidRequest,
    completion_body,
    embeddings_body,
    now_created,
    parse_embeddings,
    parse_request,
    parse_responses,
)
from ._policy import Refusal
from ._responses import (
    ITEM,
    RATELIMIT,
    RESULT,
    ROUTER,
    UNCOUNTED,
    access_line,
    answer_headers,
    clear_answer_state,
    error_response,
    json_response,
    model_not_found,
    observe_ttft,
    refusal_response,
    result_of,
    retrieve,
    task_cancelled,
    too_large,
    unauthorized,
    unhandled,
)
from ._sse import stream_answer
from ._tenants import TENANT_HEADER

__all__ = ["CompletionRoutes", "COMPLETIONS", "CHAT", "EMBEDDINGS", "RESPONSES", "MODEL_ROUTES"]

log = logging.getLogger("rxpipe.gateway")

COMPLETIONS, CHAT = "/v1/completions", "/v1/chat/completions"
EMBEDDINGS, RESPONSES = "/v1/embeddings", "/v1/responses"
#: the routes whose requests are admitted into the graph (each a POST)
MODEL_ROUTES = (COMPLETIONS, CHAT, EMBEDDINGS, RESPONSES)


class CompletionRoutes:
    """The completion handlers bound to one edge, on the loop serving it."""

    def __init__(self, edge: Edge, loop: asyncio.AbstractEventLoop) -> None:
        self.edge = edge
        self.config = edge.config
        #: the loop serving the app (``asyncio.get_running_loop()`` costs a getpid() syscall per
        #: call on Python < 3.12: the hot path reads this instead)
        self.loop = loop

    def retry_after_queue(self) -> float:
        """Retry-After for one more request refused for lack of room or an unavailable engine."""
        return self.edge.policy.retry_after_queue(self.loop.time())

    # -- OpenAI endpoints ----------------------------------------------------------------------
    async def serve(self, request: web.Request, *, route: str) -> web.StreamResponse:
        """``POST`` on one of :data:`MODEL_ROUTES`: the answer, counted by route and code and
        timed. The edge runs no aiohttp middleware and no response signal (each costs coroutine
        layers on every request): this is the one wrapper of the model routes, and
        :func:`answer_headers` sets the headers every answer carries."""
        started = time.perf_counter()
        clear_answer_state(request)
        if ROUTER_ID in request.headers:  # a router watching our credit: its calls are counted
            request[ROUTER] = router = router_id(request.headers.get(ROUTER_ID))
            request[UNCOUNTED] = router is not None
        try:
            response = await self._complete(request, route)
        except asyncio.CancelledError:
            if request[UNCOUNTED]:
                self.edge.credit_watch.seen(request[ROUTER])
            count_request(route, 499)  # client closed the request (nginx's convention)
            if self.edge.access_log:
                access_line(self.edge, request, route, None, time.perf_counter() - started)
            raise
        except Exception as error:
            response = unhandled(request, error)
        if request[UNCOUNTED]:  # decided without admission: refused, or answered otherwise
            request[UNCOUNTED] = False
            self.edge.credit_watch.seen(request[ROUTER])
        count_request(route, response.status)
        elapsed = time.perf_counter() - started
        REQUEST_DURATION.observe(elapsed)
        if not response.prepared:  # a stream set its headers before its status line went out
            answer_headers(request, response, self.edge)
        if self.edge.access_log:
            access_line(self.edge, request, route, response, elapsed)
        return response

    async def _complete(self, request: web.Request, route: str) -> web.StreamResponse:
        edge = self.edge
        loop = self.loop
        now = loop.time()
        key_id = edge.keys.authenticate(request.headers.get("Authorization"))
        if key_id is None:
            return unauthorized()
        tenant = None
        tenancy = edge.tenancy
        if tenancy is not None:  # one tenant: no per-request cost
            tenant = tenancy.tenant_of(edge.keys, key_id, request.headers.get(TENANT_HEADER))
            request[RATELIMIT] = tenancy.headers(tenant)
        refusal = edge.early_refusal(now)
        if refusal is not None:
            return self._refuse(refusal, tenant)
        limit = self.config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return too_large(limit)
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
            return too_large(limit)
        except web.RequestPayloadError as error:  # the body does not decode: the client's fault
            if isinstance(error.__cause__, ContentEncodingError):
                bad = error_response(400, "the request body does not decode with its Content-Encoding",
                                     "invalid_request_error", "invalid_content_encoding")
            else:
                bad = error_response(400, "the request body is malformed (its framing or length is wrong)",
                                     "invalid_request_error", "invalid_body")
            bad.force_close()  # what is left of the body cannot be parsed: close after answering
            return bad
        except TimeoutError:
            return await self._close_after(request, error_response(
                408, f"the request body did not arrive within {self.config.body_timeout_s:g} s",
                "invalid_request_error", "request_timeout"))
        try:
            item = self._parse(body, route)
        except InvalidRequest as error:
            return error_response(error.status, str(error), error.type, error.code, error.param)
        if item.model != self.config.model:
            return model_not_found(item.model)
        if item.features is not None:
            unsupported = edge.unsupported(item)
            if unsupported is not None:  # never admitted, never answered as if it had not asked
                return error_response(400, unsupported.client_message, "invalid_request_error",
                                      "unsupported_request", unsupported.param)
        item.api_key_id = key_id
        item.tenant = tenant
        if waited:  # the edge may have changed while the body arrived: check it again
            now = loop.time()
            refusal = edge.policy.policy(key_id, now) or edge.early_refusal(now)
        else:  # nothing ran since the first check (no await suspended): only the policy is new
            refusal = edge.policy.policy(key_id, now)
        if refusal is not None:
            return self._refuse(refusal, tenant)
        refusal = edge.admit(item, now)  # counts its own refusals per tenant
        if refusal is not None:
            return self._refuse(refusal)
        if request[UNCOUNTED]:  # in the same step as the admission: the next snapshot has both
            request[UNCOUNTED] = False
            edge.credit_watch.seen(request[ROUTER])
        if tenancy is not None:
            request[RATELIMIT] = tenancy.admitted_headers(item)
        try:
            return await self._answer(request, item, route)
        finally:
            edge.leave(item)

    def _parse(self, body: bytes, route: str) -> CompletionRequest:
        config = self.config
        if route == EMBEDDINGS:
            return parse_embeddings(body, default_model=config.model)
        if route == RESPONSES:
            return parse_responses(body, default_model=config.model, max_tokens_limit=config.max_tokens_limit)
        return parse_request(body, chat=route == CHAT, default_model=config.model,
                             max_tokens_limit=config.max_tokens_limit, max_model_len=config.max_model_len,
                             default_max_tokens=config.default_max_tokens)

    def _refuse(self, refusal: Refusal, tenant: str | None = None) -> web.Response:
        """Count ``refusal`` (per tenant too, given its tenant) and answer it."""
        self.edge.reject(refusal)
        if self.edge.tenancy is not None:
            self.edge.tenancy.count_refusal(tenant, refusal.reason)
        return refusal_response(refusal)

    def _unavailable(self, item: CompletionRequest, error: BaseException) -> web.Response:
        """503 ``unavailable`` for an admitted request the engine could not serve. The detail
        (a backend's address, say) goes to the log, never to the client."""
        log.debug("request %s: engine unavailable: %s", item.id, error)
        return self._refuse(Refusal(503, "unavailable", self.retry_after_queue(),
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
            return error_response(400, error.client_message, "invalid_request_error", "unsupported_request",
                                  error.param)
        if isinstance(error, BackendError):
            # a client's 4xx is no incident: the log says it at DEBUG (the access log has the status)
            log.log(logging.DEBUG if error.client_fault else logging.WARNING, "request %s: %s", item.id, error)
            return error_response(error.status, error.client_message, error.type, error.code or "backend_error",
                                  error.param)
        log.warning("request %s failed in the engine: %r", item.id, error)
        return error_response(500, "the model backend failed the request", "server_error", "engine_error")

    def _unanswered(self, item: CompletionRequest, reason: str) -> web.Response:
        """The answer to a request that ended without an answer before its status line went out
        (one of :data:`~rxpipe.serving.UNANSWERED_REASONS`): ``deadline`` (queued past its
        latency budget, on this host or in a worker's queue: it never ran) → 429 ``deadline`` as
        an early deadline; ``cancelled`` or ``stalled`` (the server stopped it) → 503."""
        if reason == "deadline":
            return self._refuse(Refusal(429, "deadline", self.config.retry_after_min_s,
                                        "the request waited longer than the latency budget and was not started"),
                                item.tenant)
        return self._stopped_response(f"the request was {reason} by the server before it answered", item.tenant)

    async def _close_after(self, request: web.Request, response: web.Response) -> web.Response:
        """Send ``response`` with ``Connection: close`` and close the connection at once, without
        aiohttp's lingering read of the unread body (up to 10 s holding the connection, for a body
        that is not coming: a 408's). Everything the client sent was read, so closing loses
        nothing of the answer (no reset over unread bytes)."""
        response.force_close()
        answer_headers(request, response, self.edge)
        await response.prepare(request)
        await response.write_eof()
        if request.protocol is not None:
            request.protocol.force_close()  # the transport writes what it holds, then closes
        return response

    def _stopped_response(self, reason: str, tenant: str | None) -> web.Response:
        """The request was admitted, then cut off by the edge itself: draining past its timeout,
        or the graph behind it stopped."""
        if self.edge.draining:
            return self._refuse(Refusal(503, "draining", self.config.retry_after_min_s,
                                        "the server shut down before the request finished; retry elsewhere"), tenant)
        return self._refuse(Refusal(503, "unavailable", self.retry_after_queue(), reason), tenant)

    async def _answer(self, request: web.Request, item: CompletionRequest, route: str) -> web.StreamResponse:
        edge = self.edge
        loop = self.loop
        reply = item.reply
        assert reply is not None
        request[ITEM] = item  # for the answer's x-rxpipe-cache header (ops.cache)
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
            edge.started(item, completion, loop.time())
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
                if task_cancelled():
                    raise  # the client left
                return self._stopped_response("the request was cancelled before it started", item.tenant)
            except DroppedError as error:  # shed by an overflow strategy, or its stage failed
                return self._refuse(Refusal(429, "queue_full", self.retry_after_queue(),
                                            f"the server shed the request ({error.reason}); retry later"), item.tenant)
            except EngineUnavailableError as error:
                return self._unavailable(item, error)
            if completion.finish_reason in UNANSWERED_REASONS:
                return self._unanswered(item, completion.finish_reason)
            if item.stream:
                return await stream_answer(self.edge, self.loop, request, item, completion, chat=route == CHAT,
                                           failed=self._failed, unanswered=self._unanswered,
                                           responses=route == RESPONSES)
            try:
                result = await result_of(completion)  # done already: no wait
            except EngineUnavailableError as error:
                return self._unavailable(item, error)
            request[RESULT] = result
            if result.finish_reason in UNANSWERED_REASONS:
                return self._unanswered(item, result.finish_reason)
            observe_ttft(result)
            self.edge.policy.meter.record_service(result.e2e_s - result.queue_time_s)
            if route == EMBEDDINGS:
                return json_response(200, embeddings_body(item, result))
            if route == RESPONSES:  # the backend's Response object as it is (its id names it there)
                return json_response(200, orjson.dumps(result.answer or {}))
            return json_response(200, completion_body(item, result, chat=route == CHAT, created=now_created()))
        except asyncio.CancelledError:
            item.cancel()  # the client left: a queued request never starts, a running one stops
            reply.add_done_callback(retrieve)
            raise
        except EngineError as error:
            return self._failed(item, error)
        finally:
            if not started:
                reply.remove_done_callback(on_reply)
                if reply.done() and not reply.cancelled() and reply.exception() is None:
                    on_reply(reply)  # it started before its callback ran (the client left meanwhile)
                else:
                    edge.policy.meter.record_abandon(loop.time())
