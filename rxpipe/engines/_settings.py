"""The engines' settings (:mod:`rxpipe.settings`): one typed setting per constructor argument a
pipeline may set, shared by the engines and the pipelines that build them.

Adding an engine argument that pipelines take (``prefix_cache_blocks``, say): one ``Setting``
line in :data:`SIMULATED_SETTINGS` (the engine checks it with ``SIMULATED_SETTINGS.check(name,
value, where)``) and its name in :data:`SIMULATED_PIPELINE`: the gateway pipelines build their
engine from that list (``SimulatedEngine(**{k: s[k] for k in SIMULATED_PIPELINE})``).
"""

from __future__ import annotations

from typing import Any

from ..settings import Schema, Setting

__all__ = ["SIMULATED_SETTINGS", "SIMULATED_PIPELINE", "OPENAI_SETTINGS", "STALL_TIMEOUT", "simulated_kwargs"]

#: a streaming sequence whose consumer gives no credit this long is aborted (every engine)
STALL_TIMEOUT = Setting("stall_timeout_s", 10.0, "number", "a stream whose reader gives no credit this long is "
                        "aborted (s); null: never", minimum=0, exclusive_minimum=True, nullable=True)


def _seconds(name: str, default: float | None, doc: str, *, zero: bool = True, nullable: bool = False) -> Setting:
    return Setting(name, default, "number", doc, minimum=0, exclusive_minimum=not zero, nullable=nullable)


#: :class:`~rxpipe.engines.SimulatedEngine`'s arguments
SIMULATED_SETTINGS = Schema(
    Setting("max_num_seqs", 256, "int", "engine sequence slots (vLLM's default)", minimum=1),
    Setting("max_num_batched_tokens", 8192, "int", "engine token budget per step (vLLM's default)", minimum=1),
    Setting("tokens_per_step", 1, "int", "tokens a decoding sequence makes per step", minimum=1),
    _seconds("step_overhead_s", 0.006, "engine step cost: fixed part (s)"),
    _seconds("prefill_s_per_token", 0.00005, "engine step cost per prefilled prompt token (s)"),
    _seconds("decode_s_per_seq", 0.0001, "engine step cost per decoding sequence (s)"),
    STALL_TIMEOUT,
    Setting("seed", 0, "int", "seeds output lengths, text and faults"),
    Setting("error_rate", 0.0, "number", "probability that a sequence fails", minimum=0, maximum=1),
    Setting("stall_rate", 0.0, "number", "probability that a sequence hangs stall_s before its prefill",
            minimum=0, maximum=1),
    _seconds("stall_s", 5.0, "how long a stalled sequence hangs (s)"),
    Setting("step_log", 0, "int", "steps kept in step_log", minimum=0),
    Setting("prefix_cache_blocks", 0, "int", "engine prefix cache: unpinned blocks of block_tokens tokens kept "
                                             "(LRU); 0: no prefix caching", minimum=0),
    Setting("block_tokens", 16, "int", "tokens per prefix-cache block (vLLM's default block size)", minimum=1),
)

#: the SimulatedEngine arguments the gateway pipelines take as settings (and build it from)
SIMULATED_PIPELINE = ("max_num_seqs", "max_num_batched_tokens", "step_overhead_s", "prefill_s_per_token",
                      "decode_s_per_seq", "stall_timeout_s", "prefix_cache_blocks")


def simulated_kwargs(s: dict[str, Any]) -> dict[str, Any]:
    """The SimulatedEngine arguments among resolved pipeline settings ``s``."""
    return {name: s[name] for name in SIMULATED_PIPELINE if name in s}


def _max_in_flight(value: Any) -> int | str:
    if value == "auto":
        return "auto"
    if type(value) is int and value >= 1:
        return value
    raise ValueError("not a limit")


#: :class:`~rxpipe.engines.OpenAIEngine`'s arguments
OPENAI_SETTINGS = Schema(
    Setting("max_in_flight", "auto", "int >= 1 | \"auto\"", "HTTP calls in flight at most, or \"auto\" (adaptive)",
            parse=_max_in_flight, expected="an integer >= 1 or \"auto\""),
    _seconds("connect_timeout_s", 5.0, "seconds to open a connection; null: no limit", zero=False, nullable=True),
    _seconds("read_timeout_s", 60.0, "seconds without a byte of a streamed answer; null: no limit", zero=False,
             nullable=True),
    _seconds("total_timeout_s", 600.0, "seconds for a whole call; null: no limit", zero=False, nullable=True),
    _seconds("retry_after_cap_s", 30.0, "the longest wait a backend's 429/503 can cause (s); a longer Retry-After "
                                        "fails the request at once with 503", zero=False),
    Setting("retry_after_jitter", 1.0, "number", "a 429/503 wait is jittered over up to this many more "
                                                 "Retry-Afters", minimum=0),
    Setting("throttle_retries", 5, "int", "how often one request is sent again after a 429/503", minimum=0),
    STALL_TIMEOUT,
    Setting("include_usage", True, "bool", "ask a streamed call for usage (stream_options.include_usage)"),
    Setting("max_answer_bytes", 16 * 2**20, "int",
            "the largest non-streamed answer, and the longest SSE line, read (bytes)", minimum=1),
    _seconds("credit_probe_min_s", 0.002, "a backend that advertises no room is probed (GET /v1/credit) first "
                                          "after this (s)", zero=False),
    _seconds("credit_probe_max_s", 0.05, "... the probe interval doubling up to this while it says no room (s)",
             zero=False),
    Setting("credit_fresh_s", None, "number", "a credit backend's word older than this allows one call at a time "
                                              "until its next (s); null: a word holds until the next", minimum=0,
            exclusive_minimum=True, nullable=True),
    Setting("credit_watch", True, "bool", "keep a credit backend's GET /v1/credit event stream open: its room "
                                          "arrives as it changes"),
    Setting("reroute_throttled", False, "bool", "a 429 from a backend that advertises credit fails the call at "
                                                "once, to be routed to another replica"),
)
