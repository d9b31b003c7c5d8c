"""One HTTP call of :class:`~rxpipe.engines.OpenAIEngine`, on the wire: the request body, the
streamed (SSE) or whole (JSON) answer, error bodies, and ``Retry-After``."""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import math
import time
from functools import partial
from typing import Any, Mapping

import aiohttp
import orjson

from ..errors import EngineUnavailableError
from ..serving._answers import finish_reason_of
from ..serving._ids import uuid4_hex_suffix
from ._http1 import BackendResponse
from ._openai_errors import backend_error, broken_answer
from ._openai_state import _Call, _OpenAIState

__all__ = ["parse_retry_after", "wire_request_id"]


def wire_request_id(request_id: str) -> str:
    """The ``X-Request-Id`` sent for ``request_id``: a UUID4 (servers such as llama.cpp's accept
    only a UUID4 there), the same for the same id. An id ending in a UUID4's 32 hex digits (the
    gateway's, :func:`~rxpipe.engines._ids.new_id_hex`: ``"chatcmpl-<hex>"``) is sent as those
    digits in the UUID's dashed form, so client, gateway and backend logs show one id; any other
    id as a digest of it: ``str(uuid.UUID(md5(request_id).hexdigest(), version=4))``, formatted
    without the UUID object."""
    h = uuid4_hex_suffix(request_id)
    if h is not None:
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    h = hashlib.md5(request_id.encode()).hexdigest()
    # version=4 sets the version nibble to 4 and the variant bits to 10 (RFC 9562 §4.1, §4.2)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


#: the variant nibble (``10xx``) for each hex digit of the digest
_VARIANT = {d: "89ab"[int(d, 16) & 3] for d in "0123456789abcdef"}

# sampling fields the engine sets itself (or that are the gateway's own): never passed through
_RESERVED = frozenset({"model", "prompt", "messages", "stream", "stream_options", "n", "max_tokens",
                       "max_completion_tokens", "include_usage"})

_ERROR_BODY_BYTES = 4096


def parse_retry_after(headers: Mapping[str, str], now_wall_s: float | None = None) -> float | None:
    """Seconds a 429/503 answer asks us to wait, or None when it does not say.

    Reads ``retry-after-ms`` (milliseconds; OpenAI and rxpipe's gateway send it), else
    ``Retry-After`` as delta-seconds or as an HTTP-date (RFC 9110 §10.2.3), measured from
    ``now_wall_s`` (default ``time.time()``). Negative or malformed values count as absent.
    """
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
        except ValueError:
            value = -1.0
        if 0.0 <= value < math.inf:
            return value
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        now = time.time() if now_wall_s is None else now_wall_s
        return max(0.0, when.timestamp() - now)
    return value if 0.0 <= value < math.inf else None


class _HTTPCall(_OpenAIState):
    """OpenAIEngine's HTTP calls (a mixin of OpenAIEngine)."""

    # -- one HTTP call ---------------------------------------------------------------------------
    async def _run(self, call: _Call) -> None:
        requeue = False
        try:
            requeue = await self._exchange(call)
        except asyncio.CancelledError:
            if self._task_cancelled(call):
                asyncio.current_task().uncancel()  # type: ignore[union-attr]
                return
            raise
        except Exception as error:  # not an HTTP failure: a malformed answer or a bug; this call only
            self._settle(call, False, f"a malformed answer: {error}")
            call.completion.fail(broken_answer(f"{self.base_url}: request {call.request.id} failed: {error!r}"))
        finally:
            self._close_response(call)
            self._release(call, requeue)

    def _task_cancelled(self, call: _Call) -> bool:
        """The call's task was cancelled: fail the call (it timed out) or end it ``"cancelled"``.
        True when it timed out: a failed call, not a cancelled task."""
        if call.timed_out and not call.completion.cancel_requested and not self._closed:
            # cancelled by the engine's deadline timer, not by its owner: a failed call; with
            # no answer yet the server counts as unreachable (as for a connection timeout)
            self._settle(call, False, f"no answer within total_timeout_s={self._total_timeout_s:g} s")
            message = (f"{self.base_url}: request {call.request.id} timed out after total_timeout_s="
                       f"{self._total_timeout_s} s ({call.tokens} tokens)")
            call.completion.fail(EngineUnavailableError(message) if call.response is None
                                 else broken_answer(message, timeout=True))
            return True
        self._settle(call, None)
        self._end(call, "cancelled")
        return False

    def _cancel_task(self, call: _Call) -> None:
        """Cancel the call's task (not from inside it). asyncio throws the cancellation into a
        task that has not run its first step yet without running any of ``_run``: then the
        task's done callback does what ``_run`` would have (end the call, free its slot), or
        the slot would stay taken and the completion unfinished."""
        task = call.task
        if task is None or task is asyncio.current_task():
            return
        task.cancel()
        task.add_done_callback(partial(self._after_cancel, call))

    def _after_cancel(self, call: _Call, task: asyncio.Task[None]) -> None:
        if call.task is not task:
            return  # _run ran and released the call
        self._task_cancelled(call)
        self._close_response(call)
        self._release(call, False)

    async def _exchange(self, call: _Call) -> bool:
        """Make the call and stream its answer; True when it must be retried after a pause."""
        request = call.request
        completion = call.completion
        url = self.base_url + call.path
        session = self._session
        assert session is not None
        try:
            headers, options = (self._headers, self._stream_options) if request.stream else \
                (self._answer_headers, self._answer_options)
            if self._own_request_id:
                headers = {**headers, "X-Request-Id": wire_request_id(request.id)}
            self._count_sent()
            response: BackendResponse = await session.post(url, data=self._body(call), headers=headers, **options)
        except (aiohttp.ClientError, OSError) as error:
            self._settle(call, False, f"unreachable: {error or repr(error)}")
            completion.fail(EngineUnavailableError(f"{url} unreachable: {error!r}"))
            return False
        call.response = response
        status = response.status
        credited = self._observe_credit(response.headers)
        if status == 429 or status == 503:
            self._settle(call, True)  # it answered: up, only busy
            if credited and status == 429 and self.reroute_throttled:
                self._reroute(call, response.headers)
                return False
            return self._throttled(call, status, response.headers)
        if status >= 300:
            body = await self._error_body(response)
            self._settle(call, status < 500, f"answered {status}")
            completion.fail(backend_error(status, body, response.content_type, url, request.id))
            return False
        self._streak = 0
        try:
            if call.endpoint is not None and response.content_type != "text/event-stream":
                await self._read_object(call, response)  # embeddings, a whole Response
            elif request.stream:
                if response.content_type == "application/json":  # a server that ignored "stream": true
                    await self._read_answer(call, response)
                else:
                    await self._read_events(call, response)
            elif response.content_type == "text/event-stream":  # a server that ignored "stream": false
                await self._read_events(call, response, credit=False)
            else:
                await self._read_answer(call, response)
        except (aiohttp.ClientError, OSError) as error:
            if completion.cancel_requested:  # we closed the connection ourselves
                self._settle(call, None)
                self._end(call, "cancelled")
                return False
            self._settle(call, False, f"an answer broke: {error!r}")
            completion.fail(broken_answer(f"{url}: the answer to {request.id} broke after {call.tokens} "
                                          f"tokens: {error!r}"))
            return False
        if completion.cancel_requested:  # its consumer cancelled it inside on_next
            self._settle(call, None)
            self._end(call, "cancelled")
            return False
        if completion.done:  # stalled
            self._settle(call, True)
            return False
        # read to its end ([DONE] or the body's end): the connection goes back to the pool, ours
        # once the body's last bytes arrive (aiohttp's: at once if they have, else closed)
        call.response = None
        response.release()
        if request.stream and call.endpoint is None and response.content_type != "application/json" and not (
                call.usage and isinstance(call.usage.get("prompt_tokens"), int)):
            # a stream without usage (llama-cpp-python's server): count its prompt as a
            # non-streamed answer does (see _openai_usage)
            await self._count_prompt(call)
            if completion.cancel_requested:
                self._settle(call, None)
                self._end(call, "cancelled")
                return False
        self._settle(call, True)
        self.succeeded += 1
        if call.started_s is not None:
            self._limit.on_success(self._loop.time() - call.started_s, call.tokens,  # type: ignore[union-attr]
                                   len(self._calls))
        self._end(call, finish_reason_of(call.finish_reason))
        return False

    def _body(self, call: _Call) -> bytes:
        """The backend's request body: the client's fields as it sent them (messages whole, tool
        definitions, a vendor's fields ...), with the engine's ``model`` and its own ``stream``
        and ``stream_options.include_usage`` (the client's other stream options kept)."""
        request = call.request
        sampling = request.sampling
        body: dict[str, Any] = {"model": self.model}
        if call.endpoint is not None:  # embeddings, Responses: every field as sent
            for key, value in sampling.items():
                if key != "model":
                    body[key] = value
            if call.endpoint == "responses":
                body["stream"] = request.stream
            return orjson.dumps(body)
        if call.chat:
            body["messages"] = (request.messages if request.messages is not None
                                else [{"role": "user", "content": request.prompt}])
        else:
            body["prompt"] = request.prompt
        if request.max_tokens is not None:
            body[request.max_tokens_field] = request.max_tokens
        for key, value in sampling.items():
            if key not in _RESERVED:
                body[key] = value
        options = sampling.get("stream_options")
        if request.stream:
            body["stream"] = True
            if self.include_usage:
                body["stream_options"] = {**options, "include_usage": True} if options else {"include_usage": True}
            elif options:
                body["stream_options"] = options
        else:
            body["stream"] = False  # one JSON body, its usage included (OpenAI: stream_options only with stream)
        return orjson.dumps(body)

    async def _read_events(self, call: _Call, response: BackendResponse, *, credit: bool = True) -> None:
        """Read an SSE answer's ``data:`` lines into the completion until ``[DONE]`` or the end
        of the body.

        Each read takes whatever arrived (``readany``: often dozens of events at once) and splits
        its whole lines in one pass; an unfinished line waits for the next read (at most
        ``max_answer_bytes`` of it: ValueError beyond). Lines end in LF or CRLF; blank lines,
        comments and ``event:``/``id:`` fields are skipped; each ``data:`` line is one event.
        With ``credit`` (a streamed request) each event is applied only while the consumer has
        credit, and nothing more is read from the socket while it has none (TCP backpressure:
        what one read brought is all that is held here); ``stall_timeout_s`` without credit ends
        it ``"stalled"``. Without ``credit`` (a request not streamed to its client whose server
        answered SSE although asked for ``"stream": false``) every event is applied at once.

        Stops early when the completion is cancelled or stalled. A body cut short by the server
        (no terminating chunk) raises ``aiohttp.ClientPayloadError``; a clean end without
        ``[DONE]`` is accepted (the server ended the response deliberately), but a body without
        a single ``data:`` event is not an answer (e.g. a web server's HTML page): ValueError.
        """
        content = response.content
        completion = call.completion
        cap = self.max_answer_bytes
        rest = b""
        events = False
        take = self._take if call.endpoint is None else self._take_event  # a Responses stream's events
        while True:
            # Credit: read nothing while the consumer cannot take a chunk (TCP backpressure).
            if credit and not completion.credit and not await self._await_credit(call):
                return
            data = await content.readany()
            if data:
                lines = (rest + data).split(b"\n")
                rest = lines.pop()  # an unfinished line waits for the next read
                if len(rest) > cap:
                    raise ValueError(f"an SSE line over max_answer_bytes={cap} bytes")
            else:  # the end of the body
                if not events and not rest.startswith(b"data:") and not completion.cancel_requested:
                    raise ValueError(f"not an OpenAI answer: a {response.content_type} body without one SSE event")
                lines = [rest] if rest else []  # a last line without its newline
            for line in lines:
                if not line.startswith(b"data:"):
                    continue  # blank separators, comments, event:/id: fields
                events = True
                if credit and not completion.credit and not await self._await_credit(call):
                    return
                if completion.cancel_requested:
                    return
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    return
                if payload:
                    take(call, orjson.loads(payload))
            if not data:
                return

    async def _read_answer(self, call: _Call, response: BackendResponse) -> None:
        """A whole (non-streamed) answer: one JSON body, read at once and parsed once.

        Its text is pushed as one chunk of ``usage.completion_tokens`` tokens (without usage: the
        documented estimate, 1 token per 4 UTF-8 bytes of the answer, as for prompts); its
        message's other fields (tool calls ...), log probabilities and system fingerprint go to
        the result as they are (to a streamed request that got this whole answer: its text, then
        one chunk per other field, :meth:`_whole_answer`). Not an OpenAI answer — a body that is
        not JSON (an HTML page, a truncated body) or an object without ``choices`` — raises
        ValueError; an ``error`` object too.
        """
        answer = await self._read_json(call, response)
        choices = self._open(call, answer)
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ValueError(f"not an OpenAI answer: a {response.content_type} body without choices")
        text = self._choice_text(call, choices[0], "message")
        self._whole_answer(call, answer, choices[0], text if isinstance(text, str) else "")

    async def _read_json(self, call: _Call, response: BackendResponse) -> Any:
        """The JSON body of an answer (at most ``max_answer_bytes``; ValueError beyond, and for a
        body that is not JSON)."""
        cap = self.max_answer_bytes
        length = response.content_length
        if length is not None and length > cap:
            raise ValueError(f"an answer of {length} bytes, over max_answer_bytes={cap}")
        raw = await response.content.read(cap + 1) if length is None else await response.read()
        if length is None:
            while len(raw) <= cap and not response.content.at_eof():
                raw += await response.content.read(cap + 1 - len(raw))
            if len(raw) > cap:
                raise ValueError(f"an answer over max_answer_bytes={cap} bytes")
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ValueError(f"not an OpenAI answer: a {response.content_type} body that is not JSON") from None

    @staticmethod
    def _open(call: _Call, answer: Any) -> Any:
        """The ``choices`` of a JSON answer or SSE event, after taking its ``usage`` into
        ``call``; ValueError for a non-object or an ``error`` object."""
        if not isinstance(answer, dict):
            raise ValueError(f"an answer that is not a JSON object: {str(answer)[:200]}")
        error = answer.get("error")
        if error:
            message = error.get("message", error) if isinstance(error, dict) else error
            raise ValueError(f"the server reported an error: {message}")
        usage = answer.get("usage")
        if isinstance(usage, dict):
            call.usage = usage
        return answer.get("choices")

    @staticmethod
    def _choice_text(call: _Call, choice: dict[str, Any], chat_key: str) -> Any:
        """The text of one choice (chat: ``choice[chat_key]["content"]``, ``chat_key`` being
        ``"message"`` in an answer and ``"delta"`` in an event; else ``choice["text"]``), noting
        its finish reason on ``call``."""
        if call.chat:
            part = choice.get(chat_key)
            text = part.get("content") if isinstance(part, dict) else None
        else:
            text = choice.get("text")
        reason = choice.get("finish_reason")
        if reason:
            call.finish_reason = reason
        return text

    def _take(self, call: _Call, event: Any) -> None:
        """Apply one SSE event (the JSON of one ``data:`` line): its text as one token, its
        finish reason and usage onto ``call``; ValueError for an ``error`` object or a non-object.
        A plain token event (a dict without ``error`` or ``usage`` whose delta is its content
        alone) is read inline; any other (the opening role, tool calls, reasoning, log
        probabilities, the closing finish reason) by :meth:`_take_rich`."""
        if type(event) is dict and "usage" not in event and not event.get("error"):
            choices = event.get("choices")
        else:
            choices = self._open(call, event)
        if not choices:
            return
        choice = choices[0]
        if call.chat:
            part = choice.get("delta")
            text = part.get("content") if type(part) is dict else None
            if text is None or len(part) != 1 or call.rich:  # type: ignore[arg-type]
                self._take_rich(call, event, choice, part, text)
                return
        else:
            text = choice.get("text")
            if call.rich:
                self._take_rich(call, event, choice, None, text)
                return
        reason = choice.get("finish_reason")
        if reason:
            self._take_rich(call, event, choice, None, text)
            return
        if text:
            if call.first_token_s is None:
                call.first_token_s = self._loop.time()  # type: ignore[union-attr]
            call.tokens += 1
            call.parts.append(text)
            call.completion.push(text, 1)
        elif isinstance(text, str):
            # A streamed token whose text is empty (llama.cpp sends those for the bytes of a
            # multi-byte character split across tokens): still one token generated, and pushed
            # as such, so the consumer's count is the server's (mid-stream failover continues
            # from it). Without usage these counts are used.
            call.tokens += 1
            call.completion.push("", 1)

    async def _await_credit(self, call: _Call) -> bool:
        """Park until the consumer grants credit; False (finished ``"stalled"``) after ``stall_timeout_s``."""
        loop = self._loop
        assert loop is not None
        completion = call.completion
        timeout = self.stall_timeout_s
        deadline = None
        if timeout is not None:
            # no timer of its own: the engine's deadline timer wakes it (see OpenAIEngine._expire)
            deadline = call.stall_s = loop.time() + timeout
            self._arm_deadline(deadline)
        try:
            while not completion.credit:
                if completion.cancel_requested:
                    return False
                waiter = call.waiter = loop.create_future()
                try:
                    await waiter
                finally:
                    call.waiter = None
                if deadline is not None and not completion.credit and loop.time() >= deadline:
                    self._close_response(call)  # first: the server learns before our consumer does
                    self._end(call, "stalled")
                    return False
            return True
        finally:
            call.stall_s = None

    async def _error_body(self, response: BackendResponse) -> bytes:
        """The first ``_ERROR_BODY_BYTES`` of an error answer (empty if unreadable)."""
        try:
            return await response.content.read(_ERROR_BODY_BYTES)
        except (aiohttp.ClientError, OSError):
            return b""

    def _close_response(self, call: _Call) -> None:
        response = call.response
        if response is not None:
            call.response = None
            response.close()  # closes the connection unless it was fully read (then it is pooled)
