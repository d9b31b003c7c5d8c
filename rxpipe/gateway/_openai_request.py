"""The OpenAI request bodies the edge takes, checked and turned into a
:class:`~rxpipe.serving.CompletionRequest` (DESIGN §5, "Edge, third round").

Every field of OpenAI's API reference for a route is known here with its JSON type(s)
(``CHAT_FIELDS``, ``COMPLETION_FIELDS``, ``EMBEDDING_FIELDS``, ``RESPONSE_FIELDS``): a known field
of the wrong type is a 400 naming it; every field, known or not (a vendor's extension such as
vLLM's ``guided_json`` or llama.cpp's ``min_p``), is kept as sent in ``sampling`` and forwarded
to the backend untouched. Messages are kept whole (``name``, ``tool_calls``, ``tool_call_id``,
content parts of any type), after checking the shapes OpenAI defines. What a request asks of its
engine beyond text (tool calling, log probabilities, images ...) is named in
``request.features`` with the field that asks it, so an engine that cannot serve it refuses it
(:data:`~rxpipe.serving.FEATURES`).
"""

from __future__ import annotations

from typing import Any

import orjson

from ..serving import CompletionRequest
from ..serving._ids import new_id_hex

__all__ = ["InvalidRequest", "parse_request", "parse_embeddings", "parse_responses", "CHAT_FIELDS",
           "COMPLETION_FIELDS", "EMBEDDING_FIELDS", "RESPONSE_FIELDS"]

_NUMBER = (int, float)

#: Chat Completions fields (OpenAI's API reference, ``POST /v1/chat/completions``) besides
#: ``model``, ``messages``, ``max_tokens``/``max_completion_tokens``, ``n``, ``stream`` and
#: ``stream_options``, which the request carries itself; with their JSON types
CHAT_FIELDS: dict[str, tuple[type, ...]] = {
    "audio": (dict,), "frequency_penalty": _NUMBER, "function_call": (str, dict), "functions": (list,),
    "logit_bias": (dict,), "logprobs": (bool,), "metadata": (dict,), "modalities": (list,), "moderation": (dict,),
    "parallel_tool_calls": (bool,), "prediction": (dict,), "presence_penalty": _NUMBER, "prompt_cache_key": (str,),
    "prompt_cache_options": (dict,), "prompt_cache_retention": (str,), "reasoning_effort": (str,),
    "response_format": (dict,), "safety_identifier": (str,), "seed": (int,), "service_tier": (str,),
    "stop": (str, list), "store": (bool,), "temperature": _NUMBER, "tool_choice": (str, dict), "tools": (list,),
    "top_logprobs": (int,), "top_p": _NUMBER, "user": (str,), "verbosity": (str,), "web_search_options": (dict,),
    "top_k": (int,),  # not OpenAI's: vLLM's, llama.cpp's and TGI's, with the same meaning everywhere
}
#: Completions fields (``POST /v1/completions``) besides ``model``, ``prompt``, ``max_tokens``,
#: ``n``, ``stream`` and ``stream_options``
COMPLETION_FIELDS: dict[str, tuple[type, ...]] = {
    "best_of": (int,), "echo": (bool,), "frequency_penalty": _NUMBER, "logit_bias": (dict,), "logprobs": (int,),
    "presence_penalty": _NUMBER, "seed": (int,), "stop": (str, list), "suffix": (str,), "temperature": _NUMBER,
    "top_p": _NUMBER, "user": (str,), "top_k": (int,),
}
#: Embeddings fields (``POST /v1/embeddings``) besides ``model``
EMBEDDING_FIELDS: dict[str, tuple[type, ...]] = {
    "input": (str, list), "dimensions": (int,), "encoding_format": (str,), "user": (str,),
}
#: Responses fields (``POST /v1/responses``) besides ``model`` and ``stream``
RESPONSE_FIELDS: dict[str, tuple[type, ...]] = {
    "background": (bool,), "conversation": (str, dict), "include": (list,), "input": (str, list),
    "instructions": (str,), "max_output_tokens": (int,), "max_tool_calls": (int,), "metadata": (dict,),
    "parallel_tool_calls": (bool,), "previous_response_id": (str,), "prompt": (dict,), "prompt_cache_key": (str,),
    "prompt_cache_retention": (str,), "reasoning": (dict,), "safety_identifier": (str,), "service_tier": (str,),
    "store": (bool,), "stream_options": (dict,), "temperature": _NUMBER, "text": (dict,), "tool_choice": (str, dict),
    "tools": (list,), "top_logprobs": (int,), "top_p": _NUMBER, "truncation": (str,), "user": (str,),
}

#: fields a completion request carries itself: never copied into ``sampling``
_OWN = frozenset({"model", "messages", "prompt", "max_tokens", "max_completion_tokens", "n", "stream"})
_OWN_RESPONSES = frozenset({"model", "stream"})
_OWN_EMBEDDINGS = frozenset({"model"})
_ROLES = {"system", "user", "assistant", "tool", "developer", "function"}
#: a content part's type -> the object it must carry (OpenAI's content part shapes)
_PART_OBJECTS = {"image_url": "image_url", "input_audio": "input_audio", "file": "file"}


class InvalidRequest(Exception):
    """A request the edge refuses with a 4xx: carries status, OpenAI error type and code."""

    def __init__(self, message: str, *, status: int = 400, type: str = "invalid_request_error",
                 code: str = "invalid_request", param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.type = type
        self.code = code
        self.param = param


def _fail(message: str, code: str, param: str | None = None) -> InvalidRequest:
    return InvalidRequest(message, code=code, param=param)


def _object(body: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise _fail(f"request body is not valid JSON: {error}", "invalid_json") from None
    if not isinstance(data, dict):
        raise _fail("request body must be a JSON object", "invalid_json")
    return data


def _model(data: dict[str, Any], default_model: str) -> str:
    model = data.get("model", default_model)
    if not isinstance(model, str) or not model:
        raise _fail("'model' must be a non-empty string", "invalid_model", "model")
    return model


def _fields(data: dict[str, Any], known: dict[str, tuple[type, ...]], own: frozenset[str] = _OWN) -> dict[str, Any]:
    """Every field but the request's ``own``, as sent; a known one of the wrong type → 400 naming
    it (a bool is no number). A known field set to null is left out (it means the default)."""
    sampling: dict[str, Any] = {}
    for key, value in data.items():  # the body's few keys, not every known field
        if key in own:
            continue
        types = known.get(key)
        if types is not None:
            if value is None:
                continue
            if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
                raise _fail(f"'{key}' has the wrong type", "invalid_type", key)
        sampling[key] = value
    return sampling


def _check_content(content: Any, i: int, features: dict[str, str]) -> None:
    """A message's ``content``: a string, null, or a list of content parts, each an object with a
    ``type``: ``text`` (``text``), ``refusal`` (``refusal``), ``image_url``, ``input_audio``,
    ``file`` (each carrying the object of its name) or another type (a vendor's), kept as sent.
    A part that is not text names its type as a feature (``messages[i].content[j]``)."""
    if content is None or isinstance(content, str):
        return
    where = f"messages[{i}].content"
    if not isinstance(content, list):
        raise _fail(f"{where} must be a string or a list of content parts", "invalid_content", where)
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise _fail(f"{where}[{j}] must be a content part: an object with a 'type'", "invalid_content",
                        f"{where}[{j}]")
        if kind == "text" or kind == "refusal":
            if not isinstance(part.get(kind), str):
                raise _fail(f"{where}[{j}]: a {kind} part needs a string '{kind}'", "invalid_content", f"{where}[{j}]")
            continue
        carried = _PART_OBJECTS.get(kind)
        if carried is not None and not isinstance(part.get(carried), dict):
            raise _fail(f"{where}[{j}]: a {kind} part needs an object '{carried}'", "invalid_content", f"{where}[{j}]")
        if kind == "image_url" and not isinstance(part["image_url"].get("url"), str):
            raise _fail(f"{where}[{j}]: image_url.url must be a string", "invalid_content", f"{where}[{j}]")
        features.setdefault(kind, f"{where}[{j}]")


def _check_function(function: Any, where: str) -> None:
    if not (isinstance(function, dict) and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments", ""), str)):
        raise _fail(f"{where} must be an object with a string 'name' and string 'arguments'", "invalid_messages",
                    where)


def _messages(raw: Any, features: dict[str, str]) -> list[dict[str, Any]]:
    """The messages, kept as sent, after checking their shapes; tool calls and tool results name
    the feature ``tools``, content parts that are not text their type."""
    if raw is None:
        raise _fail("'messages' is required", "missing_messages", "messages")
    if not isinstance(raw, list) or not raw:
        raise _fail("'messages' must be a non-empty array", "invalid_messages", "messages")
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise _fail(f"messages[{i}] must be an object", "invalid_messages", f"messages[{i}]")
        role = message.get("role")
        if role not in _ROLES:
            raise _fail(f"messages[{i}].role must be one of {sorted(_ROLES)}", "invalid_role", f"messages[{i}].role")
        _check_content(message.get("content"), i, features)
        if role == "tool" or role == "function":
            features.setdefault("tools", f"messages[{i}]")
            if role == "tool" and not isinstance(message.get("tool_call_id"), str):
                raise _fail(f"messages[{i}]: a tool message needs a string 'tool_call_id'", "invalid_messages",
                            f"messages[{i}].tool_call_id")
        if len(message) == 2 and "content" in message:
            continue  # role and content only: the usual message
        name = message.get("name")
        if name is not None and not isinstance(name, str):
            raise _fail(f"messages[{i}].name must be a string", "invalid_messages", f"messages[{i}].name")
        calls = message.get("tool_calls")
        if calls is not None:
            where = f"messages[{i}].tool_calls"
            if not isinstance(calls, list):
                raise _fail(f"{where} must be an array", "invalid_messages", where)
            for k, call in enumerate(calls):
                if not isinstance(call, dict) or not isinstance(call.get("id"), str):
                    raise _fail(f"{where}[{k}] must be an object with a string 'id'", "invalid_messages",
                                f"{where}[{k}]")
                if call.get("type", "function") == "function":
                    _check_function(call.get("function"), f"{where}[{k}].function")
            features.setdefault("tools", where)
        if message.get("function_call") is not None:
            _check_function(message["function_call"], f"messages[{i}].function_call")
            features.setdefault("tools", f"messages[{i}].function_call")
    return raw


def _features(sampling: dict[str, Any], features: dict[str, str], chat: bool) -> None:
    """The features the fields of ``sampling`` ask for (see :data:`~rxpipe.serving.FEATURES`)."""
    if sampling.get("tools"):
        features.setdefault("tools", "tools")
    if sampling.get("functions"):
        features.setdefault("tools", "functions")
    choice = sampling.get("tool_choice")
    if isinstance(choice, dict) or choice == "required":
        features.setdefault("tools", "tool_choice")
    call = sampling.get("function_call")
    if isinstance(call, dict) or (isinstance(call, str) and call not in ("none", "auto")):
        features.setdefault("tools", "function_call")
    if chat:
        if sampling.get("logprobs"):
            features.setdefault("logprobs", "logprobs")
        if sampling.get("top_logprobs") is not None:
            features.setdefault("logprobs", "top_logprobs")
    elif sampling.get("logprobs") is not None:
        features.setdefault("logprobs", "logprobs")
    fmt = sampling.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type", "text") != "text":
        features.setdefault("response_format", "response_format")
    modalities = sampling.get("modalities")
    if isinstance(modalities, list) and "audio" in modalities:
        features.setdefault("audio_output", "modalities")
    for key, feature in (("audio", "audio_output"), ("prediction", "prediction"),
                         ("web_search_options", "web_search"), ("reasoning_effort", "reasoning")):
        if sampling.get(key) is not None:
            features.setdefault(feature, key)
    if sampling.get("echo"):
        features.setdefault("echo", "echo")
    if sampling.get("suffix"):
        features.setdefault("suffix", "suffix")
    best_of = sampling.get("best_of")
    if isinstance(best_of, int) and best_of > 1:
        features.setdefault("best_of", "best_of")


def parse_request(body: bytes, *, chat: bool, default_model: str, max_tokens_limit: int,
                  max_model_len: int | None = None, default_max_tokens: int | None = None) -> CompletionRequest:
    """Validate a JSON body into a :class:`CompletionRequest` (not yet admitted).

    Raises InvalidRequest (400) for malformed JSON, a non-object body, a missing or wrong
    ``prompt``/``messages`` (messages: a role of OpenAI's, ``content`` a string, null or content
    parts; ``tool_calls`` with ids and functions; a tool message's ``tool_call_id``), a bad
    ``max_tokens`` or ``max_completion_tokens`` (int in [1, max_tokens_limit]), ``n`` other than
    the integer 1, a known field of the wrong type (:data:`CHAT_FIELDS`,
    :data:`COMPLETION_FIELDS`), ``temperature`` outside [0, 2], ``top_p`` outside (0, 1],
    ``stop`` other than a string or a list of at most 4 strings; and, with ``max_model_len``
    (tokens), code ``context_length_exceeded`` when prompt tokens (the documented estimate,
    :attr:`~rxpipe.serving.CompletionRequest.prompt_tokens`) plus ``max_tokens`` exceed it, in
    vLLM's words. A missing ``max_tokens`` becomes what remains of ``max_model_len``, capped by
    ``default_max_tokens`` (``max_tokens_defaulted`` is then set). Every other field goes to
    ``sampling`` as sent; the features asked for to ``features``. The model is checked by the
    caller (404).
    """
    data = _object(body)
    model = _model(data, default_model)
    features: dict[str, str] = {}
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    if chat:
        messages = _messages(data.get("messages"), features)
    else:
        raw = data.get("prompt")
        if raw is None:
            raise _fail("'prompt' is required", "missing_prompt", "prompt")
        if isinstance(raw, list):
            if len(raw) != 1 or not isinstance(raw[0], str):
                raise _fail("'prompt' must be a string (or a list of exactly one string)", "invalid_prompt", "prompt")
            raw = raw[0]
        if not isinstance(raw, str):
            raise _fail("'prompt' must be a string", "invalid_prompt", "prompt")
        prompt = raw
    field = "max_completion_tokens" if chat and data.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = data.get(field)
    if max_tokens is not None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= max_tokens_limit:
            raise _fail(f"'{field}' must be an integer in [1, {max_tokens_limit}], got {max_tokens!r}",
                        "invalid_max_tokens", field)
    n = data.get("n", 1)
    if n is not None and (type(n) is not int or n != 1):
        raise _fail(f"only n=1 is supported, got {n!r}", "invalid_n", "n")
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise _fail("'stream' must be a boolean", "invalid_stream", "stream")
    sampling = _fields(data, CHAT_FIELDS if chat else COMPLETION_FIELDS)
    stream_options = sampling.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise _fail("'stream_options' must be an object", "invalid_stream_options", "stream_options")
    _check_ranges(sampling)
    if sampling:
        _features(sampling, features, chat)
    if stream_options and stream_options.get("include_usage"):
        sampling["include_usage"] = True
    request = CompletionRequest(prompt=prompt, messages=messages, max_tokens=max_tokens, model=model,
                                stream=stream, sampling=sampling,
                                id=("chatcmpl-" if chat else "cmpl-") + new_id_hex(),
                                features=features or None, max_tokens_field=field)
    if max_model_len is not None:
        _fit_context(request, chat, max_model_len, default_max_tokens)
    return request


def _check_ranges(sampling: dict[str, Any]) -> None:
    """The sampling fields' ranges (OpenAI's API reference; vLLM refuses the same values)."""
    temperature = sampling.get("temperature")
    if temperature is not None and not 0 <= temperature <= 2:
        raise _fail(f"'temperature' must be in [0, 2], got {temperature!r}", "invalid_temperature", "temperature")
    top_p = sampling.get("top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise _fail(f"'top_p' must be in (0, 1], got {top_p!r}", "invalid_top_p", "top_p")
    stop = sampling.get("stop")
    if isinstance(stop, list) and (len(stop) > 4 or not all(isinstance(s, str) for s in stop)):
        raise _fail("'stop' must be a string or a list of at most 4 strings", "invalid_stop", "stop")


def _fit_context(request: CompletionRequest, chat: bool, max_model_len: int, default_max_tokens: int | None) -> None:
    """Refuse a request whose prompt plus completion exceeds ``max_model_len`` (400
    ``context_length_exceeded``, vLLM's message), and fill in a missing ``max_tokens``."""
    prompt_tokens = request.prompt_tokens
    wanted = request.max_tokens
    completion = wanted if wanted is not None else 1
    if prompt_tokens + completion > max_model_len:
        where = "messages" if chat else "prompt"
        shown = wanted if wanted is not None else 0
        raise InvalidRequest(
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt_tokens + shown} tokens ({prompt_tokens} in the {where}, {shown} in the completion). "
            f"Please reduce the length of the {where} or completion.",
            code="context_length_exceeded", param=where)
    if wanted is None:
        remaining = max_model_len - prompt_tokens
        request.max_tokens = remaining if default_max_tokens is None else min(remaining, default_max_tokens)
        request.max_tokens_defaulted = True


def _input(value: Any) -> None:
    """An embeddings ``input``: a non-empty string, or a non-empty list of strings, of token ids,
    or of token-id lists (OpenAI's four forms)."""
    if isinstance(value, str):
        if value:
            return
    elif isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value) or all(type(v) is int for v in value) or all(
                isinstance(v, list) and v and all(type(t) is int for t in v) for v in value):
            return
    raise _fail("'input' must be a non-empty string, or a non-empty array of strings, of token ids or of "
                "arrays of token ids", "invalid_input", "input")


def parse_embeddings(body: bytes, *, default_model: str) -> CompletionRequest:
    """Validate a ``POST /v1/embeddings`` body: ``input`` (required: a string or a list, which
    goes to the backend as one call, batched as the client sent it), ``encoding_format``
    (``"float"`` or ``"base64"``), ``dimensions`` (>= 1), ``user``; other fields kept as sent.
    InvalidRequest (400) otherwise. The request's feature is ``embeddings``."""
    data = _object(body)
    model = _model(data, default_model)
    if "input" not in data:
        raise _fail("'input' is required", "missing_input", "input")
    sampling = _fields(data, EMBEDDING_FIELDS, _OWN_EMBEDDINGS)
    _input(data["input"])
    fmt = sampling.get("encoding_format")
    if fmt is not None and fmt not in ("float", "base64"):
        raise _fail("'encoding_format' must be \"float\" or \"base64\"", "invalid_encoding_format", "encoding_format")
    dimensions = sampling.get("dimensions")
    if dimensions is not None and dimensions < 1:
        raise _fail("'dimensions' must be an integer >= 1", "invalid_dimensions", "dimensions")
    return CompletionRequest(model=model, sampling=sampling, id="embd-" + new_id_hex(), endpoint="embeddings",
                             features={"embeddings": "input"})


def parse_responses(body: bytes, *, default_model: str, max_tokens_limit: int) -> CompletionRequest:
    """Validate a ``POST /v1/responses`` body: ``input`` (a string or a list of input items),
    ``stream`` (a boolean), ``max_output_tokens`` (in [1, max_tokens_limit]), the known fields'
    types (:data:`RESPONSE_FIELDS`); every field kept as sent (the backend is sent the same).
    InvalidRequest (400) otherwise. The request's feature is ``responses``."""
    data = _object(body)
    model = _model(data, default_model)
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise _fail("'stream' must be a boolean", "invalid_stream", "stream")
    sampling = _fields(data, RESPONSE_FIELDS, _OWN_RESPONSES)
    if "input" not in sampling and "previous_response_id" not in sampling and "prompt" not in sampling:
        raise _fail("'input' is required", "missing_input", "input")
    limit = sampling.get("max_output_tokens")
    if limit is not None and not 1 <= limit <= max_tokens_limit:
        raise _fail(f"'max_output_tokens' must be an integer in [1, {max_tokens_limit}], got {limit!r}",
                    "invalid_max_output_tokens", "max_output_tokens")
    _check_ranges(sampling)
    return CompletionRequest(model=model, stream=stream, sampling=sampling, id="resp-" + new_id_hex(),
                             endpoint="responses", features={"responses": "input"})
