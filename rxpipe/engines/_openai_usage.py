"""The prompt tokens of a streamed answer that carried no usage (a mixin of OpenAIEngine).

A streamed call asks for ``stream_options.include_usage``; vLLM, SGLang and OpenAI then end the
stream with the exact counts. llama-cpp-python's server sends none when streaming, while its
non-streamed answer says ``usage.prompt_tokens`` — so without more, the same request was charged
one count streamed (rxpipe's estimate, 1 token per 4 UTF-8 bytes) and another not (issue 26).
The completion tokens of such a stream are counted from it, one per token chunk (see
``_openai_wire``); the prompt's count is asked the way the non-streamed path gets it: one
non-streamed call of the same prompt (or messages, with the request's sampling fields, so a chat
template sees what it saw) and ``max_tokens: 1``, after the stream, when the server has just
evaluated that prompt (llama.cpp reuses it: a prefix-cache hit). Counts are kept per prompt
(``usage_cache_entries``, least recently used out), so a repeated prompt costs nothing more; a
probe that fails leaves the estimate.

A backend that sends no usage at all, streamed or not (the probe's answer has none either, or
a non-streamed answer came without it), is counted the same way both ways: the prompt by the
estimate and the answer by its estimate (1 token per 4 UTF-8 bytes of its text and tool calls),
as its non-streamed answer is; the engine then probes no more.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from typing import Any

import aiohttp
import orjson

from ._http1 import BackendResponse
from ._openai_state import _Call, _OpenAIState
from ._openai_wire import wire_request_id

__all__ = ["_UsageProbe"]

log = logging.getLogger("rxpipe.engine")


class _UsageProbe(_OpenAIState):
    """OpenAIEngine's count of a streamed prompt without usage (see the module docstring)."""

    #: prompt-token counts kept (prompts; least recently used out)
    usage_cache_entries = 4096
    #: prompt-token counts asked of the backend, by a digest of the probe's body
    _prompt_counts: OrderedDict[bytes, int]
    #: streamed answers that ended without usage, and the probes made for them
    usage_missing: int
    usage_probes: int

    def _probe_body(self, call: _Call) -> bytes:
        body = orjson.loads(self._body(call))
        body["stream"] = False
        body["max_tokens"] = 1
        body.pop("stream_options", None)
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)

    async def _count_prompt(self, call: _Call) -> None:
        """Set ``call.usage["prompt_tokens"]`` of a streamed answer that ended without usage (or,
        the backend sending none at all, have it counted by the estimate: ``call.estimated``)."""
        self.usage_missing += 1
        if self._usage_never:
            call.estimated = True
            return
        body = self._probe_body(call)
        key = hashlib.blake2b(body, digest_size=16).digest()
        counts = self._prompt_counts
        count = counts.get(key)
        if count is None:
            count = await self._probe(call, body)
            if count is None:
                return
            if count < 0:  # answered without usage: the backend says none, streamed or not
                self._usage_never = True
                call.estimated = True
                return
            counts[key] = count
            if len(counts) > self.usage_cache_entries:
                counts.popitem(last=False)
        else:
            counts.move_to_end(key)
        call.usage = {"prompt_tokens": count}

    async def _probe(self, call: _Call, body: bytes) -> int | None:
        """The backend's prompt-token count of ``call``'s prompt; None when the probe failed;
        -1 when it answered without usage."""
        session = self._session
        if session is None:
            return None
        self.usage_probes += 1
        url = self.base_url + call.path
        headers = self._answer_headers
        if self._own_request_id:
            headers = {**headers, "X-Request-Id": wire_request_id(call.request.id + ":usage")}
        try:
            self._count_sent()
            response: BackendResponse = await session.post(url, data=body, headers=headers, **self._answer_options)
            try:
                if response.status != 200:
                    log.debug("%s: the prompt-token count of %s: answered %d", self.base_url, call.request.id,
                              response.status)
                    return None
                answer = orjson.loads(await response.read())
            finally:
                response.release()  # pooled when whole, else closed (a cancellation too)
        except (aiohttp.ClientError, OSError, orjson.JSONDecodeError) as error:
            log.debug("%s: the prompt-token count of %s failed: %r", self.base_url, call.request.id, error)
            return None
        usage: Any = answer.get("usage") if isinstance(answer, dict) else None
        if isinstance(answer, dict) and isinstance(answer.get("choices"), list) and usage is None:
            return -1
        count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return None
        return count
