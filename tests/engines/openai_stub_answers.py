"""What the stub backend (``openai_stub_server.py``) answers beyond plain text, shaped as OpenAI's API
does (so the ``openai`` SDK parses it): tool calls, reasoning, refusals, log probabilities,
embeddings and the Responses API. Deterministic: the same request gives the same answer.

Chat answers follow the request, as a model would:

- ``tools`` in the request and the last message not a tool result: a tool call to each of the
  first two tools (one with ``parallel_tool_calls: false`` or one tool), arguments built from
  each tool's parameter schema (a string property ``p`` is ``"p-1"``, a number 1, a boolean true),
  streamed as OpenAI does: per call a first fragment with ``id``, ``type`` and the name, then the
  arguments in pieces of :data:`ARGUMENT_PIECE` characters; ``finish_reason`` ``"tool_calls"``;
- the last message a tool result: the text ``" the tool said <its content>"``;
- legacy ``functions`` (no ``tools``): a ``function_call`` of the first, its name in the first
  fragment, the arguments in pieces of :data:`ARGUMENT_PIECE`; ``finish_reason`` ``"function_call"``;
- a user message containing ``[reason]``: three ``reasoning_content`` deltas before the text;
- a user message containing ``[refuse]``: a refusal (``refusal`` deltas, content null);
- ``response_format`` ``json_object``: the content is ``{"answer": "<the plain text>"}``;
  ``json_schema``: an object of the schema's properties (as tool arguments are made), both in
  pieces of :data:`ARGUMENT_PIECE` characters;
- ``logprobs`` (chat: true, completions: an int): every text token carries its log probability
  and ``top_logprobs`` alternatives (chat's and completions' shapes).
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

#: characters of a tool call's arguments per streamed fragment
ARGUMENT_PIECE = 5
REASONING = ["thinking", " about", " it"]
REFUSAL = ["I", " can't", " help", " with", " that"]
FINGERPRINT = "fp_stub"


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _arguments(tool: dict[str, Any]) -> str:
    function = tool.get("function") or {}
    properties = ((function.get("parameters") or {}).get("properties") or {})
    values: dict[str, Any] = {}
    for name, schema in properties.items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        values[name] = 1 if kind in ("number", "integer") else True if kind == "boolean" else f"{name}-1"
    return json.dumps(values)


def _token_logprob(text: str, i: int, top: int) -> dict[str, Any]:
    logprob = -0.25 - i / 100
    alternatives = [{"token": text, "logprob": logprob, "bytes": list(text.encode())}]
    alternatives += [{"token": f" alt{k}", "logprob": logprob - 1.0 - k, "bytes": list(f" alt{k}".encode())}
                     for k in range(max(0, top - 1))]
    return {"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": alternatives[:top]}


class Plan:
    """A rich answer: ``chunks`` (each ``(delta, logprobs)``, chat; or ``(text, logprobs)``,
    completions), ``finish``, and the whole ``message`` / ``logprobs`` of the same answer."""

    def __init__(self) -> None:
        self.chunks: list[tuple[Any, Any]] = []
        self.finish = "stop"
        self.message: dict[str, Any] = {"role": "assistant", "content": None}
        self.logprobs: Any = None


def plan(body: dict[str, Any], chat: bool, tokens: list[str]) -> Plan | None:
    """The rich answer to ``body`` (``tokens``: the stub's plain text tokens), or None when the
    plain answer fits (no tools, no markers, no log probabilities)."""
    messages = body.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    users = " ".join(_text_of(m) for m in messages if isinstance(m, dict) and m.get("role") == "user")
    wants_logprobs = bool(body.get("logprobs")) if chat else body.get("logprobs") is not None
    top = int(body.get("top_logprobs") or 0) if chat else int(body.get("logprobs") or 0)
    tools = body.get("tools") or []
    answer = Plan()
    if chat and last.get("role") == "tool":
        tokens = [" the", " tool", " said", " " + _text_of(last)]
    elif chat and tools:
        chosen = tools[:1] if body.get("parallel_tool_calls") is False else tools[:2]
        calls = []
        for i, tool in enumerate(chosen):
            name = (tool.get("function") or {}).get("name", f"tool{i}")
            arguments = _arguments(tool)
            call_id = f"call_{i}"
            calls.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
            answer.chunks.append(({"tool_calls": [{"index": i, "id": call_id, "type": "function",
                                                    "function": {"name": name, "arguments": ""}}]}, None))
            for start in range(0, len(arguments), ARGUMENT_PIECE):
                piece = arguments[start:start + ARGUMENT_PIECE]
                answer.chunks.append(({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}, None))
        answer.message["tool_calls"] = calls
        answer.finish = "tool_calls"
        return answer
    elif chat and body.get("functions"):
        function = body["functions"][0]
        name = function.get("name", "function0")
        arguments = _arguments({"function": function})
        answer.chunks.append(({"function_call": {"name": name, "arguments": ""}}, None))
        for start in range(0, len(arguments), ARGUMENT_PIECE):
            answer.chunks.append(({"function_call": {"arguments": arguments[start:start + ARGUMENT_PIECE]}}, None))
        answer.message["function_call"] = {"name": name, "arguments": arguments}
        answer.finish = "function_call"
        return answer
    elif chat and "[refuse]" in users:
        answer.chunks = [({"refusal": piece}, None) for piece in REFUSAL]
        answer.message["refusal"] = "".join(REFUSAL)
        return answer
    fmt = body.get("response_format") or {}
    if fmt.get("type") in ("json_object", "json_schema"):
        schema = (fmt.get("json_schema") or {}).get("schema")
        content = (_arguments({"function": {"parameters": schema}}) if fmt["type"] == "json_schema"
                   else json.dumps({"answer": "".join(tokens).strip()}))
        tokens = [content[i:i + ARGUMENT_PIECE] for i in range(0, len(content), ARGUMENT_PIECE)]
    elif not (wants_logprobs or (chat and "[reason]" in users) or (chat and last.get("role") == "tool")):
        return None
    if chat and "[reason]" in users:
        answer.chunks += [({"reasoning_content": piece}, None) for piece in REASONING]
        answer.message["reasoning_content"] = "".join(REASONING)
    entries = [_token_logprob(t, i, top) for i, t in enumerate(tokens)]
    for text, entry in zip(tokens, entries, strict=True):
        if chat:
            answer.chunks.append(({"content": text}, {"content": [entry], "refusal": None} if wants_logprobs else None))
        else:
            answer.chunks.append((text, _completion_logprobs([entry]) if wants_logprobs else None))
    answer.message["content"] = "".join(tokens)
    if wants_logprobs:
        answer.logprobs = {"content": entries, "refusal": None} if chat else _completion_logprobs(entries)
    return answer


def _completion_logprobs(entries: list[dict[str, Any]]) -> dict[str, Any]:
    offsets, at = [], 0
    for e in entries:
        offsets.append(at)
        at += len(e["token"])
    return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
            "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
            "text_offset": offsets}


def embedding(text: Any, dimensions: int) -> list[float]:
    """A deterministic vector for one input (its bytes folded into ``dimensions`` buckets)."""
    data = json.dumps(text).encode()
    vector = [0.0] * dimensions
    for i, b in enumerate(data):
        vector[i % dimensions] += b / 255
    return [round(v, 6) for v in vector]


def embeddings_answer(body: dict[str, Any]) -> dict[str, Any]:
    inputs = body["input"]
    if isinstance(inputs, str) or (isinstance(inputs, list) and inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    dimensions = int(body.get("dimensions") or 4)
    data = []
    for i, item in enumerate(inputs):
        vector = embedding(item, dimensions)
        value: Any = vector
        if body.get("encoding_format") == "base64":
            value = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode()
        data.append({"object": "embedding", "index": i, "embedding": value})
    tokens = sum(len(json.dumps(item)) // 4 + 1 for item in inputs)
    return {"object": "list", "data": data, "model": body.get("model", "stub"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def response_object(body: dict[str, Any], words: list[str], status: str = "completed") -> dict[str, Any]:
    text = "".join(words)
    return {"id": "resp_stub1", "object": "response", "created_at": 1700000000, "status": status,
            "model": body.get("model", "stub"), "output": [
                {"type": "message", "id": "msg_stub1", "status": status, "role": "assistant",
                 "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": {"input_tokens": 5, "output_tokens": len(words), "total_tokens": 5 + len(words),
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}


def response_events(body: dict[str, Any], words: list[str]) -> list[dict[str, Any]]:
    """The events of a streamed Response, in OpenAI's order, each with its ``sequence_number``."""
    created = {**response_object(body, [], "in_progress"), "output": [], "usage": None}
    item = {"type": "message", "id": "msg_stub1", "status": "in_progress", "role": "assistant", "content": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": created},
        {"type": "response.in_progress", "response": created},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.content_part.added", "item_id": "msg_stub1", "output_index": 0, "content_index": 0,
         "part": {"type": "output_text", "text": "", "annotations": []}},
    ]
    events += [{"type": "response.output_text.delta", "item_id": "msg_stub1", "output_index": 0, "content_index": 0,
                "delta": w, "logprobs": []} for w in words]
    text = "".join(words)
    done = response_object(body, words)
    events += [
        {"type": "response.output_text.done", "item_id": "msg_stub1", "output_index": 0, "content_index": 0,
         "text": text, "logprobs": []},
        {"type": "response.content_part.done", "item_id": "msg_stub1", "output_index": 0, "content_index": 0,
         "part": {"type": "output_text", "text": text, "annotations": []}},
        {"type": "response.output_item.done", "output_index": 0, "item": done["output"][0]},
        {"type": "response.completed", "response": done},
    ]
    for n, event in enumerate(events):
        event["sequence_number"] = n
    return events
