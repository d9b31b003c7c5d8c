"""The edge's routes and their dispatch on (method, path), which aiohttp's low-level server calls
(``_server.EdgeRunner``), and the operational routes: models, health, readiness, metrics, credit."""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import HttpVersion11, web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from ..view import PATHS as VIEW_PATHS
from ..view import ViewRoutes
from ._completions import CHAT, COMPLETIONS, EMBEDDINGS, RESPONSES, CompletionRoutes
from ._credit import CREDIT_PATH
from ._credit_watch import wants_watch
from ._edge import Edge
from ._metrics import count_request
from ._responses import (
    CREDIT,
    answer_headers,
    clear_answer_state,
    error_response,
    json_response,
    model_not_found,
    too_large,
    unauthorized,
    unhandled,
)
from ._server import EdgeApp

if TYPE_CHECKING:
    from ..view import PipelineView

__all__ = ["make_app"]


_MODELS = "/v1/models"
#: ``/v1/models/{model}``: one path segment (aiohttp's ``{model}`` pattern, ``[^{}/]+``) of the
#: percent-encoded path (``URL.path_safe``: an encoded ``/`` stays ``%2F``)
_MODEL_PATH = re.compile(r"/v1/models/[^{}/]+")
#: the methods a GET route answers (aiohttp's ``add_get``: HEAD too)
_GET = ("GET", "HEAD")
#: the fixed paths the edge serves: an answer on one of them is counted under its path (a 405
#: too), any other under "other" (the route label stays a bounded set)
_ROUTES = frozenset({COMPLETIONS, CHAT, EMBEDDINGS, RESPONSES, "/v1/models", "/metrics", "/health", "/healthz",
                     "/readyz", CREDIT_PATH, *VIEW_PATHS})


class _Operational:
    """The operational handlers bound to one edge."""

    def __init__(self, edge: Edge) -> None:
        self.edge = edge
        self.config = edge.config

    def _model(self) -> dict[str, object]:
        return {"id": self.config.model, "object": "model", "created": 0, "owned_by": "rxpipe"}

    async def models(self, request: web.Request) -> web.Response:
        if self.edge.keys.authenticate(request.headers.get("Authorization")) is None:
            return unauthorized()
        return json_response(200, orjson.dumps({"object": "list", "data": [self._model()]}))

    async def model(self, request: web.Request) -> web.Response:
        """``GET /v1/models/{model}`` (the dispatch sends only paths :data:`_MODEL_PATH` matches)."""
        if self.edge.keys.authenticate(request.headers.get("Authorization")) is None:
            return unauthorized()
        model = _unquote_path_safe(request.rel_url.path_safe[len(_MODELS) + 1:])
        if model != self.config.model:
            return model_not_found(model)
        return json_response(200, orjson.dumps(self._model()))

    async def healthz(self, request: web.Request) -> web.Response:
        return json_response(200, b'{"status":"ok"}')

    async def readyz(self, request: web.Request) -> web.Response:
        edge = self.edge
        if edge.draining:
            return json_response(503, b'{"status":"draining"}', {"Retry-After": "1"})
        if not edge.available:
            return json_response(503, b'{"status":"unavailable"}', {"Retry-After": "1"})
        return json_response(200, b'{"status":"ready"}')

    async def credit(self, request: web.Request) -> web.StreamResponse:
        """``GET /v1/credit``: the edge's credit as JSON (the answer's headers say it too), for
        routers probing a backend that said it has no room; no key needed, as for ``/health``.
        With ``Accept: text/event-stream``: the watch, an event stream of the credit as it
        changes (:mod:`~rxpipe.gateway._credit_watch`)."""
        edge = self.edge
        credit = request[CREDIT] = edge.credit(edge.loop_time())
        if wants_watch(request):
            return await edge.credit_watch.serve(request, credit,
                                                 lambda response: answer_headers(request, response, edge))
        return json_response(200, orjson.dumps(credit.as_json()))

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _operational(edge: Edge, route: str, handler: Handler) -> Handler:
    """``handler`` of an operational route, counted by route and code, with the answer headers."""

    async def counted(request: web.Request) -> web.StreamResponse:
        clear_answer_state(request)
        try:
            response = await handler(request)
        except asyncio.CancelledError:
            count_request(route, 499)
            raise
        except Exception as error:
            response = unhandled(request, error)
        count_request(route, response.status)
        answer_headers(request, response, edge)
        return response

    return counted


def _unrouted(edge: Edge, request: web.Request, allowed: Iterable[str]) -> web.Response:
    """OpenAI's JSON error body for a path no route serves (404 ``unknown_route``) or a method
    the path's route does not take (405 ``method_not_allowed``, with ``Allow``: the ``allowed``
    methods), counted under the path if it is one of :data:`_ROUTES`, else "other"."""
    clear_answer_state(request)
    if allowed:
        response = error_response(405, f"{request.method} is not allowed on {request.path}", "invalid_request_error",
                          "method_not_allowed", headers={"Allow": ",".join(sorted(allowed))})
    else:
        response = error_response(404, f"no route {request.method} {request.path}", "not_found_error", "unknown_route")
    count_request(request.path if request.path in _ROUTES else "other", response.status)
    answer_headers(request, response, edge)
    return response


def _transfer_coding(edge: Edge, request: web.Request) -> web.Response | None:
    """RFC 9112 §6.1: the only transfer coding the edge decodes is ``chunked`` (aiohttp's parser
    reads the chunks and ignores any coding before it, so ``gzip, chunked`` would reach the
    handler as a plain body). Any other coding gets 501 ``unsupported_transfer_encoding`` (the
    JSON error body), and the connection is closed: its body cannot be framed as meant."""
    codings = [c.strip().lower() for c in ",".join(request.headers.getall("Transfer-Encoding")).split(",")]
    if all(coding in ("chunked", "") for coding in codings):
        return None
    clear_answer_state(request)
    shown = ", ".join(c for c in codings if c)[:100]
    response = error_response(501, f"the transfer coding {shown!r} is not supported (only chunked)",
                              "invalid_request_error", "unsupported_transfer_encoding")
    response.force_close()
    count_request(request.path if request.path in _ROUTES else "other", response.status)
    answer_headers(request, response, edge)
    return response


async def _expect(edge: Edge, request: web.Request) -> web.Response | None:
    """RFC 9110 §10.1.1 ``Expect``, as aiohttp's router does it: ``100-continue`` on HTTP/1.1
    gets ``100 Continue`` written at once (the client then sends its body; None: the route
    answers); any other expectation, or one on HTTP/1.0, is refused with 417
    ``expectation_failed`` (OpenAI's JSON error body, counted like any answer)."""
    expect = request.headers.get("Expect", "")
    if request.version == HttpVersion11 and expect.lower() == "100-continue":
        limit = edge.config.max_body_bytes
        length = request.content_length
        if length is not None and length > limit:
            # decided on the Content-Length before inviting the body (RFC 9110 §10.1.1: a server
            # that will refuse it answers the final status instead of 100), and closed after:
            # a client may send the body anyway
            clear_answer_state(request)
            response = too_large(limit)
            response.force_close()
            count_request(request.path if request.path in _ROUTES else "other", response.status)
            answer_headers(request, response, edge)
            return response
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's own status line is still to be written
        await request.writer.drain()
        return None
    clear_answer_state(request)
    response = error_response(417, f"unknown Expect: {expect[:100]}", "invalid_request_error", "expectation_failed")
    count_request(request.path if request.path in _ROUTES else "other", response.status)
    answer_headers(request, response, edge)
    return response


def _unquote_path_safe(value: str) -> str:
    """A path segment of ``URL.path_safe`` decoded as aiohttp decodes a route's match
    (``web_urldispatcher._unquote_path_safe``: ``%2F`` and ``%25``, the rest is decoded already)."""
    if "%" not in value:
        return value
    return value.replace("%2F", "/").replace("%25", "%")


def _view_routes(edge: Edge, view: PipelineView) -> dict[str, dict[str, Handler]]:
    """The live view's routes (``rxpipe.view.ViewRoutes``), counted like the operational ones;
    its event streams end when the edge drains."""
    routes = ViewRoutes(view, stopping=lambda: edge.draining,
                        before_send=lambda request, response: answer_headers(request, response, edge))
    handlers: dict[str, Any] = routes.handlers()
    return {path: dict.fromkeys(_GET if path != "/pipeline/events" else ("GET",), _operational(edge, path, handler))
            for path, handler in handlers.items()}


def make_app(edge: Edge, loop: asyncio.AbstractEventLoop) -> EdgeApp:
    """The edge on ``loop``: one handler for aiohttp's low-level server that dispatches on
    (method, percent-encoded path) to the routes of the edge (no router, no middleware),
    and the body limit ``config.max_body_bytes``.

    Routes: ``POST /v1/completions``, ``/v1/chat/completions``, ``/v1/embeddings``,
    ``/v1/responses``; ``GET`` (and ``HEAD``) ``/v1/models``, ``/v1/models/{model}``, ``/metrics``,
    ``/health``, ``/healthz``, ``/readyz``, ``/v1/credit``, and the live view's ``/pipeline.json``, ``/pipeline`` and
    (``GET``) ``/pipeline/events``.
    Anything else: 404 ``unknown_route``, or 405 ``method_not_allowed`` with ``Allow`` on a known
    path (:func:`_unrouted`). A request with ``Expect`` is answered as :func:`_expect` says."""
    completions = CompletionRoutes(edge, loop)
    operational = _Operational(edge)
    by_path: dict[str, dict[str, Handler]] = {
        # partials of one coroutine function: called straight, no wrapper layer
        route: {"POST": functools.partial(completions.serve, route=route)}
        for route in (COMPLETIONS, CHAT, EMBEDDINGS, RESPONSES)
    }
    for path, handler in ((_MODELS, operational.models), ("/metrics", operational.metrics),
                          ("/health", operational.healthz),  # vLLM's name for the liveness probe
                          ("/healthz", operational.healthz), ("/readyz", operational.readyz),
                          (CREDIT_PATH, operational.credit)):
        by_path[path] = dict.fromkeys(_GET, _operational(edge, path, handler))
    if edge.view is not None:
        by_path.update(_view_routes(edge, edge.view))
    one_model = dict.fromkeys(_GET, _operational(edge, "other", operational.model))
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
                return _unrouted(edge, request, methods or ())
        if "Transfer-Encoding" in request.headers:
            refused = _transfer_coding(edge, request)
            if refused is not None:
                return refused
        if "Expect" in request.headers:
            refused = await _expect(edge, request)
            if refused is not None:
                return refused
        return await handler(request)

    return EdgeApp(dispatch, edge.config.max_body_bytes)
