"""What an answer carries beyond text, as data: deltas folded into the whole message, a message
streamed again as deltas, the answer's token estimate, prompt estimates of non-text parts, and all
of it across a broker's wire."""

from __future__ import annotations

import orjson

from rxpipe.errors import UnsupportedRequestError
from rxpipe.serving import PART_TOKENS, CompletionRequest, CompletionResult, DeltaChunk, TokenChunk, estimate_tokens
from rxpipe.serving._answers import (
    AnswerBuilder,
    answer_tokens,
    finish_reason_of,
    merge_logprobs,
    message_deltas,
    replay_pieces,
)
from rxpipe.transport._codec import (
    chunk_payload,
    decode_reply,
    done_payload,
    error_from_fields,
    error_payload,
    result_from_fields,
)


def test_openai_tool_call_fragments_fold_into_the_calls_by_index() -> None:
    whole = AnswerBuilder()
    for delta in (
            {"role": "assistant", "content": None, "refusal": None},
            {"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
                             "function": {"name": "f", "arguments": ""}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": '{"x"'}}]},
            {"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
                             "function": {"name": "g", "arguments": "{"}}]},
            {"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]},
            {"tool_calls": [{"index": 1, "function": {"arguments": "}"}}]}):
        whole.add(delta)
    assert whole.message("") == {"content": None, "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
        {"id": "call_b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}


def test_llama_cpp_fragments_that_repeat_the_name_and_id_fold_to_one_call() -> None:
    whole = AnswerBuilder()
    for piece in ("{", ' "unit"', ": ", '"c"}'):
        call = {"index": 0, "id": "call__0_f_cmpl-1", "type": "function", "function": {"name": "f", "arguments": piece}}
        whole.add({"role": None, "content": None, "function_call": {"name": "f", "arguments": piece},
                   "tool_calls": [call]})
    message = whole.message("")
    assert message == {"function_call": {"name": "f", "arguments": '{ "unit": "c"}'}, "content": None,
                       "tool_calls": [{"id": "call__0_f_cmpl-1", "type": "function",
                                       "function": {"name": "f", "arguments": '{ "unit": "c"}'}}]}


def test_text_fields_concatenate_and_logprobs_lists_join() -> None:
    whole = AnswerBuilder()
    for piece in ("think", "ing"):
        whole.add({"reasoning_content": piece})
    whole.add_logprobs({"content": [{"token": "a"}], "refusal": None})
    whole.add_logprobs({"content": [{"token": "b"}], "refusal": None})
    assert whole.message("ab") == {"reasoning_content": "thinking"}
    assert whole.logprobs == {"content": [{"token": "a"}, {"token": "b"}], "refusal": None}
    completions = merge_logprobs({"tokens": ["a"], "token_logprobs": [-1.0], "text_offset": [0]},
                                 {"tokens": ["b"], "token_logprobs": [-2.0], "text_offset": [1]})
    assert completions == {"tokens": ["a", "b"], "token_logprobs": [-1.0, -2.0], "text_offset": [0, 1]}
    assert AnswerBuilder().message("text") is None  # text only: nothing beside it


def test_a_whole_message_streams_again_as_deltas_reasoning_first_calls_last() -> None:
    message = {"content": None, "reasoning_content": "why", "refusal": None,
               "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                              {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}
    assert message_deltas(message) == [
        {"reasoning_content": "why"},
        {"tool_calls": [{"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"tool_calls": [{"index": 1, "id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}]
    result = CompletionResult(" x y", "tool_calls", 1, 2, 0.0, 0.0, 0.0, message,
                              {"content": [{"token": " x"}, {"token": " y"}]})
    assert replay_pieces(result, [" x", " y"]) == [
        ("", {"reasoning_content": "why"}, None), (" x", None, {"content": [{"token": " x"}]}),
        (" y", None, {"content": [{"token": " y"}]}), *[("", d, None) for d in message_deltas(message)[1:]]]


def test_the_answer_estimate_counts_text_and_tool_calls_alike_streamed_or_not() -> None:
    calls = {"tool_calls": [{"function": {"name": "get", "arguments": '{"city": "Paris"}'}}]}
    assert answer_tokens("", calls) == 5  # 3 + 17 bytes
    assert answer_tokens("abcdefgh", None) == 2 and answer_tokens("", None) == 0
    assert [finish_reason_of(r) for r in ("tool_calls", "length", None, "abort", "content_filter")] == [
        "tool_calls", "length", "stop", "stop", "content_filter"]


def test_prompt_estimates_count_parts_tool_calls_tools_and_inputs() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 4000}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "abcd" * 2}, image]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "abcd", "arguments": "abcdabcd"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "abcd"}]
    assert estimate_tokens(None, messages) == 6 + PART_TOKENS  # 24 bytes of text, one image (not its base64)
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert CompletionRequest(messages=messages, sampling={"tools": tools}).prompt_tokens == (
        6 + PART_TOKENS + -(-len(orjson.dumps(tools)) // 4))
    assert CompletionRequest(endpoint="embeddings", sampling={"input": ["abcd", "abcdabcd"]}).prompt_tokens == 3
    assert CompletionRequest(endpoint="embeddings", sampling={"input": [[1, 2, 3], [4]]}).prompt_tokens == 4
    assert CompletionRequest(endpoint="responses", sampling={
        "input": [{"role": "user", "content": "abcdabcd"}], "instructions": "abcd"}).prompt_tokens == 3


def test_deltas_results_and_refusals_cross_the_broker_whole() -> None:
    chunk = DeltaChunk(3, "", 1, {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}, {"content": []})
    message = decode_reply(chunk_payload("r", chunk))
    assert message is not None and (message["d"], message["l"]) == (chunk.delta, chunk.logprobs)
    assert set(orjson.loads(chunk_payload("r", TokenChunk(0, " a", 1)))) == {"id", "k", "i", "t", "n"}  # lean
    result = CompletionResult("", "tool_calls", 3, 5, 0.1, 0.2, 0.3, {"tool_calls": [{"id": "c"}], "content": None},
                              {"content": [{"token": "x"}]}, {"prompt_tokens": 3, "completion_tokens": 5,
                                                              "total_tokens": 8}, "fp_1", None)
    done = decode_reply(done_payload("r", result))
    assert done is not None and result_from_fields(done["r"]) == result
    refusal = decode_reply(error_payload("r", "log detail", unavailable=False, unsupported=UnsupportedRequestError(
        "log detail", client_message="model 'm' does not support tools", param="tools")))
    assert refusal is not None
    error = error_from_fields(refusal)
    assert isinstance(error, UnsupportedRequestError)
    assert (error.client_message, error.param) == ("model 'm' does not support tools", "tools")
