"""What an OpenAI-compatible answer carries beyond text, read by :class:`~rxpipe.engines.OpenAIEngine`
(a mixin): tool calls, function calls, refusals, reasoning, log probabilities and the system
fingerprint of chat and completions answers (DESIGN §5, "Edge, third round"); embeddings and
Responses answers, passed on whole; the counts of the result.

Streamed, each event that carries more than a plain token of text (a ``tool_calls`` fragment, a
reasoning delta, log probabilities) is one chunk of its own (``Completion.push_delta``), one for
one, in order, under the consumer's credit; the whole answer's message is folded from those
deltas too (:class:`~rxpipe.serving._answers.AnswerBuilder`), so the result says what a
non-streamed answer would have (for the cache, a failover, a client that was not streamed).
"""

from __future__ import annotations

from typing import Any

from ..serving._answers import AnswerBuilder, answer_tokens, message_deltas
from ._http1 import BackendResponse
from ._openai_state import _Call, _OpenAIState

__all__ = ["_Answers"]

_ENDS = ("response.completed", "response.incomplete", "response.failed")


def _fields_of(part: dict[str, Any]) -> dict[str, Any] | None:
    """A delta's or message's fields besides role and content (null and empty ones are none)."""
    fields = None
    for key, value in part.items():
        if key != "role" and key != "content" and value is not None and value != []:
            if fields is None:
                fields = {}
            fields[key] = value
    return fields


class _Answers(_OpenAIState):
    """OpenAIEngine's reading of answers beyond plain text (see the module docstring)."""

    def _take_rich(self, call: _Call, event: dict[str, Any], choice: dict[str, Any], part: Any,
                   text: Any) -> None:
        """One streamed event beyond a plain token: the opening role, the closing finish reason,
        or a delta with tool calls, reasoning or log probabilities — each such delta one chunk."""
        reason = choice.get("finish_reason")
        if reason:
            call.finish_reason = reason
        fingerprint = event.get("system_fingerprint")
        if isinstance(fingerprint, str):
            call.fingerprint = fingerprint
        fields = _fields_of(part) if type(part) is dict else None
        logprobs = choice.get("logprobs")
        completion = call.completion
        if fields is None and logprobs is None:
            if text:
                if call.first_token_s is None:
                    call.first_token_s = self._loop.time()  # type: ignore[union-attr]
                call.tokens += 1
                call.parts.append(text)
                completion.push(text, 1)
            elif isinstance(text, str) and not reason and not (type(part) is dict and "role" in part):
                call.tokens += 1  # an empty-text token (see _take); not the opening role's delta
                completion.push("", 1)
            return
        if not isinstance(text, str):
            text = ""
        if call.first_token_s is None:
            call.first_token_s = self._loop.time()  # type: ignore[union-attr]
        call.tokens += 1
        if text:
            call.parts.append(text)
        whole = call.answer_fields
        if whole is None:
            whole = call.answer_fields = AnswerBuilder()
        if fields is not None:
            whole.add(fields)
        whole.add_logprobs(logprobs)
        if call.request.stream:
            completion.push_delta(text, 1, fields, logprobs)
        else:  # its client gets the whole answer: the text here, the rest in the result
            completion.push(text, 1)

    def _take_event(self, call: _Call, event: Any) -> None:
        """One event of a streamed Responses answer: one chunk carrying the event as it is (its
        ``response.output_text.delta`` text also as the chunk's text, one token); the final
        ``response.completed`` (or ``incomplete``, ``failed``) gives the whole Response and its
        usage."""
        if not isinstance(event, dict):
            raise ValueError(f"a Responses event that is not a JSON object: {str(event)[:200]}")
        kind = event.get("type")
        text = event.get("delta") if kind == "response.output_text.delta" else None
        if kind in _ENDS:
            response = event.get("response")
            if isinstance(response, dict):
                call.answer = response
                usage = response.get("usage")
                if isinstance(usage, dict):
                    call.usage = usage
                details = response.get("incomplete_details")
                if isinstance(details, dict) and details.get("reason") == "max_output_tokens":
                    call.finish_reason = "length"
        tokens = 0
        if isinstance(text, str) and text:
            if call.first_token_s is None:
                call.first_token_s = self._loop.time()  # type: ignore[union-attr]
            call.tokens += 1
            call.parts.append(text)
            tokens = 1
        else:
            text = ""
        call.completion.push_delta(text, tokens, event)

    def _whole_answer(self, call: _Call, answer: dict[str, Any], choice: dict[str, Any], text: str) -> None:
        """A non-streamed chat or completions answer's text, message fields, log probabilities,
        fingerprint and usage onto ``call``, its text pushed (see ``_read_answer``)."""
        fields = None
        if call.chat:
            message = choice.get("message")
            if isinstance(message, dict):
                fields = _fields_of(message)
                if fields is not None and message.get("content", "") is None:
                    fields["content"] = None  # as the backend said it (a tool call's null content)
        logprobs = choice.get("logprobs")
        fingerprint = answer.get("system_fingerprint")
        if isinstance(fingerprint, str):
            call.fingerprint = fingerprint
        if fields is not None or logprobs is not None:
            whole = call.answer_fields = AnswerBuilder()
            whole.fields = fields or {}
            whole.logprobs = logprobs
        usage = answer.get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if not isinstance(usage, dict):
            self._usage_never = True
        elif isinstance(usage.get("prompt_tokens"), int):
            self._usage_never = False
        if not text and fields is None and logprobs is None:
            return
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            tokens = answer_tokens(text, fields)
        call.first_token_s = self._loop.time()  # type: ignore[union-attr]
        call.tokens = tokens
        completion = call.completion
        if text:
            call.parts.append(text)
        if not call.request.stream or (fields is None and logprobs is None):
            if text:
                completion.push(text, tokens)
            return
        # a streamed request answered whole (a server that ignored "stream": true): its text,
        # then one chunk per other field, as a stream would have had them
        if text or logprobs is not None:
            completion.push_delta(text, tokens, None, logprobs)
            tokens = 0
        for delta in message_deltas(fields):
            completion.push_delta("", tokens, delta)
            tokens = 0

    async def _read_object(self, call: _Call, response: BackendResponse) -> None:
        """A whole embeddings answer (``data``: the vectors) or Response object, kept as it is
        for the client; its usage and (a Response's) output text onto ``call``. ValueError for a
        body that is not one (not JSON, no ``data``, an ``error`` object)."""
        answer = await self._read_json(call, response)
        if not isinstance(answer, dict) or answer.get("error"):
            message = answer.get("error") if isinstance(answer, dict) else str(answer)[:200]
            raise ValueError(f"not an answer: {message}")
        if call.endpoint == "embeddings" and not isinstance(answer.get("data"), list):
            raise ValueError("not an embeddings answer: no 'data' list")
        if call.endpoint == "responses" and not isinstance(answer.get("output"), list):
            raise ValueError("not a Response: no 'output' list")
        call.answer = answer
        usage = answer.get("usage")
        if isinstance(usage, dict):
            call.usage = usage
        call.first_token_s = self._loop.time()  # type: ignore[union-attr]
        for item in answer.get("output") or ():
            for part in (item.get("content") or ()) if isinstance(item, dict) else ():
                if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    call.parts.append(part["text"])
        details = answer.get("incomplete_details")
        if isinstance(details, dict) and details.get("reason") == "max_output_tokens":
            call.finish_reason = "length"

    def _answer_of(self, call: _Call, text: str) -> tuple[int, int, Any, Any, Any, str | None, Any]:
        """``(prompt_tokens, completion_tokens, message, logprobs, usage, system_fingerprint,
        answer)`` of the result: the counts from the backend's usage (a Response's
        ``input_tokens``/``output_tokens``), else the prompt's estimate and the tokens streamed
        (the answer's estimate when the backend sends no usage at all); ``usage`` only when it is
        the backend's own answer's."""
        request = call.request
        usage = call.usage or {}
        if call.endpoint == "responses":
            prompt, done = usage.get("input_tokens"), usage.get("output_tokens")
        else:
            prompt, done = usage.get("prompt_tokens"), usage.get("completion_tokens")
        whole = call.answer_fields
        message = whole.message(text) if whole is not None else None
        if not isinstance(prompt, int) or isinstance(prompt, bool):
            prompt = request.prompt_tokens
        own = isinstance(done, int) and not isinstance(done, bool)
        if not own:
            done = 0 if call.endpoint == "embeddings" else (
                answer_tokens(text, message) if call.estimated else call.tokens)
        if call.endpoint == "embeddings" and call.usage is not None:
            own = True
        return (prompt, done, message, whole.logprobs if whole is not None else None,  # type: ignore[return-value]
                call.usage if own else None, call.fingerprint, call.answer)
