"""What a request may ask of its engine beyond text generation, and what an engine declares it
serves (DESIGN §5, "Edge, third round").

The edge names each feature a request asks for, with the field that asks it
(:attr:`~rxpipe.serving.CompletionRequest.features`); an engine declares the features it serves
(:attr:`~rxpipe.serving.Engine.features`). A request asking for one its engine lacks is refused
(400 ``unsupported_request``, ``param`` naming the field) before it is admitted, never answered
with a 200 that ignored it.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from typing import Any

__all__ = ["FEATURES", "ALL_FEATURES", "unsupported_feature", "describe_feature", "common_features"]

#: feature -> what it is (the words of the 400's message). Content parts of a type not named here
#: (a vendor's ``video_url``, say) are features of their type's name.
_DESCRIPTIONS = {
    "tools": "tool calling (tools, tool_choice, functions, function_call, tool messages)",
    "logprobs": "log probabilities (logprobs, top_logprobs)",
    "response_format": "structured output (response_format json_object or json_schema)",
    "image_url": "image inputs (image_url content parts)",
    "input_audio": "audio inputs (input_audio content parts)",
    "file": "file inputs (file content parts)",
    "audio_output": "audio output (modalities with audio, audio)",
    "prediction": "predicted outputs (prediction)",
    "web_search": "web search (web_search_options)",
    "reasoning": "reasoning effort (reasoning_effort)",
    "echo": "echoing the prompt (echo)",
    "suffix": "a suffix after the completion (suffix)",
    "best_of": "best_of above 1",
    "embeddings": "embeddings (POST /v1/embeddings)",
    "responses": "the Responses API (POST /v1/responses)",
}

#: every feature a request can ask by an OpenAI field (see the module docstring)
FEATURES: frozenset[str] = frozenset(_DESCRIPTIONS)


class _AllFeatures(frozenset):  # type: ignore[type-arg]
    """Every feature, named or not: what an engine that forwards a request to a backend as it is
    declares (the backend decides, and its refusal reaches the client as it said it)."""

    def __contains__(self, item: object) -> bool:
        return True

    def __repr__(self) -> str:
        return "ALL_FEATURES"


#: the declaration of an engine that passes every request on to a backend that decides
ALL_FEATURES: frozenset[str] = _AllFeatures()


def unsupported_feature(features: Mapping[str, str] | None, supported: Container[str]) -> tuple[str, str] | None:
    """The first ``(feature, param)`` of a request's ``features`` not in ``supported``, or None."""
    if features:
        for feature, param in features.items():
            if feature not in supported:
                return feature, param
    return None


def describe_feature(feature: str) -> str:
    """A feature in words, for an error message."""
    return _DESCRIPTIONS.get(feature, f"{feature} content parts")


def common_features(declared: Iterable[Any]) -> frozenset[str]:
    """The features every one of several engines serves (a request may go to any of them):
    :data:`ALL_FEATURES` when each declares it, else the intersection of the others'."""
    sets = [d for d in declared if d is not ALL_FEATURES]
    if not sets:
        return ALL_FEATURES
    return frozenset.intersection(*(frozenset(s) for s in sets))
