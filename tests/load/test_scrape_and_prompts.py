"""Reading a server's queue from /metrics; Retry-After parsing; prompt files."""

from __future__ import annotations

import email.utils
import time

import pytest

from rxpipe.load import default_prompts, parse_prompts, parse_queue_running, retry_after_s

RXPIPE_TEXT = """# HELP rxpipe_stage_buffered_items Items held by a stage.
# TYPE rxpipe_stage_buffered_items gauge
rxpipe_stage_buffered_items{stage="queue"} 7.0
rxpipe_stage_buffered_items{stage="batch"} 2.0
# TYPE rxpipe_engine_waiting_seqs gauge
rxpipe_engine_waiting_seqs{engine="sim"} 1.0
# TYPE rxpipe_engine_running_seqs gauge
rxpipe_engine_running_seqs{engine="sim"} 4.0
rxpipe_engine_running_seqs{engine="other"} 1.0
"""

VLLM_TEXT = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 12.0
"""


def test_queue_and_running_from_rxpipe_and_vllm_metrics() -> None:
    assert parse_queue_running(RXPIPE_TEXT) == (10.0, 5.0)
    assert parse_queue_running(VLLM_TEXT) == (12.0, 3.0)
    assert parse_queue_running("# nothing here\n") == (None, None)


def test_retry_after_prefers_milliseconds_then_seconds_then_a_date() -> None:
    assert retry_after_s({"retry-after-ms": "350", "Retry-After": "1"}) == 0.35
    assert retry_after_s({"Retry-After": "2"}) == 2.0
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28.0 < (retry_after_s({"Retry-After": when}) or 0) <= 30.0
    assert retry_after_s({"Retry-After": "soon"}) is None and retry_after_s({}) is None


def test_prompt_files_and_the_shipped_set() -> None:
    prompts = parse_prompts('{"prompt": "a"}\n\n{"messages": [{"role": "user", "content": "b"}], "max_tokens": 5}\n')
    assert [(p.prompt, p.max_tokens) for p in prompts] == [("a", None), (None, 5)]
    assert prompts[1].messages == ({"role": "user", "content": "b"},)
    for bad, message in (("[1]", "expected a JSON object"), ('{"x": 1}', "needs"), ("{", "not JSON"),
                         ('{"prompt": "a", "max_tokens": 0}', "max_tokens"), ("", "no prompts")):
        with pytest.raises(ValueError, match=message):
            parse_prompts(bad, "f.jsonl")
    shipped = default_prompts()
    assert len(shipped) == 16 and all(p.prompt for p in shipped)


def test_the_retry_delay_is_what_the_server_asked_within_60_s_else_the_sdk_backoff() -> None:
    import random

    from rxpipe.load._client import _backoff_s

    rng = random.Random(0)
    assert _backoff_s(0, 0.35, rng) == 0.35 and _backoff_s(3, 60.0, rng) == 60.0
    for retry, asked in ((0, None), (1, 0.0), (2, 61.0), (5, None)):
        base = min(0.5 * 2 ** retry, 8.0)  # the openai SDK's backoff, up to 25 % jitter below
        assert 0.75 * base <= _backoff_s(retry, asked, rng) <= base
