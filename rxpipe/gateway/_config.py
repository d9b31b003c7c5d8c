"""Configuration of the HTTP edge (DESIGN §5–6): :class:`GatewayConfig`, one typed setting per
field (:mod:`rxpipe.settings`), and the edge's settings as pipelines take them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..settings import Schema, Setting, SettingError, check_fields, schema_of, setting

__all__ = ["GatewayConfig", "parse_api_keys", "EDGE_SETTINGS", "QUEUE_CAPACITY", "gateway_config"]


def parse_api_keys(value: str | int | float | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"k1,k2"`` or a list → a tuple of non-empty, stripped keys (empty: no auth)."""
    if value is None:
        return ()
    if isinstance(value, (int, float)):  # --set api_keys=12345 parses as JSON: a number
        value = str(value)
    items = value.split(",") if isinstance(value, str) else list(value)
    keys = tuple(str(k).strip() for k in items if str(k).strip())
    return keys


def _keys(value: Any) -> tuple[str, ...]:
    """The ``keys`` kind: a string of comma-separated keys, a JSON integer typed bare (its text),
    or a list of strings → a tuple of keys. Never a bool (``api_keys=true`` must not enable a key
    named "True")."""
    if isinstance(value, bool) or not (isinstance(value, (str, int, list, tuple))):
        raise TypeError("not keys")
    if isinstance(value, (list, tuple)) and not all(isinstance(k, str) for k in value):
        raise TypeError("not keys")
    return parse_api_keys(value)


def _env_keys() -> tuple[str, ...]:
    return parse_api_keys(os.environ.get("RXPIPE_API_KEYS"))


@dataclass(frozen=True)
class GatewayConfig:
    """Settings of :class:`~rxpipe.gateway.Gateway`, each a typed setting (``schema_of(GatewayConfig)``
    is their table; a wrong value raises :class:`~rxpipe.settings.SettingError` naming the field).

    model: the one model id served (``GET /v1/models``; any other → 404).
    api_keys: accepted bearer keys; empty means no authentication. Defaults to the
        comma-separated ``RXPIPE_API_KEYS`` environment variable.
    key_rate / key_burst: per-API-key token bucket (requests/s, requests); ``key_rate=None``
        disables per-key policing. Without configured keys every client shares one bucket.
    latency_budget_s: refuse (429 ``deadline``) a request whose estimated time to answer — the
        queue wait (backlog / drain rate, with a 10 % margin) plus the p90 of recent service
        times — exceeds it (seconds); None disables the check. Admitted requests carry
        ``deadline_s`` = arrival + budget (one still queued then is refused late, never run).
    max_body_bytes: request bodies above it get 413 (bytes).
    body_timeout_s: a request body not fully received within it gets 408 (seconds).
    max_tokens_limit: largest ``max_tokens`` accepted (tokens); above it → 400.
    stream_window: credit window of an SSE stream (chunks requested ahead of the socket).
    stream_buffer_bytes: write-buffer high-water mark of an SSE connection (bytes): a slow
        reader stops the stream's credit once this much is waiting in the process.
    retry_after_min_s / retry_after_max_s: clamp of every Retry-After (seconds, RFC 9110); the
        maximum also caps the honest wait of a backend that asked for longer.
    max_model_len: context length (tokens): prompt tokens (estimated, 1 per 4 UTF-8 bytes) plus
        ``max_tokens`` over it → 400 ``context_length_exceeded`` before admission.
    default_max_tokens: a request without ``max_tokens`` gets what remains of ``max_model_len``,
        capped by this (tokens; None: no cap, as vLLM does).
    max_connections: open connections at most (lowered to what ``ulimit -n`` allows); one over
        it gets 503 and is closed.
    keepalive_timeout_s: an idle keep-alive connection is closed after it (seconds).
    header_timeout_s: a new connection that has not sent a complete request head within it is
        closed (seconds).
    shutdown_timeout_s: at stop, after the drain: how long connections opened before the
        listener closed get to have their request answered (503 ``draining``), then how long
        aiohttp waits for a handler still running before cancelling it (seconds, each; a second
        SIGINT/SIGTERM cuts it short).
    credit_watchers_max: ``GET /v1/credit`` event streams (routers watching the edge's credit,
        DESIGN §8b) open at once at most; one more gets 429 ``too_many_watchers``.
    credit_heartbeat_s: a credit watch repeats the snapshot this often when nothing changed
        (seconds, at most 2: a router takes a watch silent for 3 s for dead): its reader knows
        the stream is alive.
    tenants_file: path of a tenants file (JSON, or TOML by its ``.toml`` suffix; schema in
        :class:`~rxpipe.gateway.Tenants`), or None for one tenant. With it, admission is per
        tenant (DESIGN §5 "Many tenants"): auth keys are ``api_keys`` plus every tenant's keys,
        rpm/tpm limits answer with OpenAI's ``x-ratelimit-*`` headers, SIGHUP reloads the file.
    """

    model: str = setting("sim", "str", "the model id served (GET /v1/models; any other gets 404)", allow_empty=False)
    api_keys: tuple[str, ...] = setting(
        type="keys", doc="bearer keys accepted; empty: no authentication", default_factory=_env_keys, parse=_keys,
        expected="a string of comma-separated keys", secret=True, default_text="$RXPIPE_API_KEYS")
    key_rate: float | None = setting(None, "number", "per-API-key policing at the edge: requests/s; null: off",
                                     minimum=0, exclusive_minimum=True, nullable=True)
    key_burst: int = setting(10, "int", "per-API-key bucket size: requests", minimum=1)
    latency_budget_s: float | None = setting(
        None, "number", "refuse (429 deadline) when the estimated time to answer exceeds it (s); null: off",
        minimum=0, exclusive_minimum=True, nullable=True)
    max_body_bytes: int = setting(1 << 20, "int", "larger request bodies get 413 (bytes)", minimum=1)
    body_timeout_s: float = setting(30.0, "number", "a request body not received whole within it gets 408 (s)",
                                    minimum=0, exclusive_minimum=True)
    max_tokens_limit: int = setting(32768, "int", "largest max_tokens accepted; above it 400 (tokens)", minimum=1)
    stream_window: int = setting(2, "int", "credit window of an SSE stream: chunks requested ahead of the socket",
                                 minimum=1)
    stream_buffer_bytes: int = setting(16384, "int", "write buffer of an SSE connection: a slow reader's stream gets "
                                                     "no credit beyond it (bytes)", minimum=1)
    retry_after_min_s: float = setting(1.0, "number", "smallest Retry-After of a refusal (s)", minimum=1)
    retry_after_max_s: float = setting(60.0, "number", "largest Retry-After of a refusal (s); also caps a backend's "
                                                       "longer wait", minimum=1)
    max_model_len: int = setting(8192, "int", "context length: prompt + max_tokens over it gets 400 (tokens)",
                                 minimum=1)
    default_max_tokens: int | None = setting(
        None, "int", "cap of the max_tokens given to a request without one (tokens); null: what remains of "
                     "max_model_len", minimum=1, nullable=True)
    max_connections: int = setting(4096, "int", "open HTTP connections at most (within ulimit -n)", minimum=1)
    keepalive_timeout_s: float = setting(75.0, "number", "an idle keep-alive connection is closed after it (s)",
                                         minimum=0, exclusive_minimum=True)
    header_timeout_s: float = setting(10.0, "number", "a new connection without a complete request head by then is "
                                                      "closed (s)", minimum=0, exclusive_minimum=True)
    shutdown_timeout_s: float = setting(2.0, "number", "at stop, after the drain: connections already open get this "
                                                       "long to have what they sent answered 503 draining (s)",
                                        minimum=0)
    credit_watchers_max: int = setting(64, "int", "GET /v1/credit event streams (routers watching the credit) open "
                                                  "at once; one more gets 429", minimum=1)
    # at most 2 s: a router deems a watch that said nothing for 3 s dead (engines' WATCH_SILENCE_S)
    credit_heartbeat_s: float = setting(1.0, "number", "a credit watch repeats the snapshot this often when nothing "
                                                       "changed (s); at most 2: a router takes 3 s of silence for a "
                                                       "dead watch", minimum=0, exclusive_minimum=True, maximum=2)
    tenants_file: str | None = setting(None, "str", "tenants (JSON or TOML): per-tenant fair queue, priority, "
                                                    "rpm/tpm (the manual's \"Many tenants\"); null: one tenant",
                                       nullable=True, allow_empty=False)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.retry_after_min_s > self.retry_after_max_s:
            raise SettingError(f"setting retry_after_min_s ({self.retry_after_min_s:g}) must not exceed "
                               f"retry_after_max_s ({self.retry_after_max_s:g})", "retry_after_min_s")

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}


#: the edge's settings as the gateway pipelines take them (``--set``): every field of
#: :class:`GatewayConfig`, ``api_keys`` defaulting to ``""`` (then ``RXPIPE_API_KEYS``)
EDGE_SETTINGS: Schema = schema_of(GatewayConfig).replace(
    "api_keys", default="", default_text=None,
    doc="comma-separated bearer keys; empty: the RXPIPE_API_KEYS environment variable (prefer it: a command line "
        "is readable by every local user), else no auth")


#: the bound of the queue behind the edge (``edge_queue``, ``fair_queue``), as pipelines take it
QUEUE_CAPACITY = Setting("queue_capacity", 100, "int", "requests admitted and not yet running, at most (what a batch "
                                                       "stage holds included)", minimum=1)


def gateway_config(s: Mapping[str, Any]) -> GatewayConfig:
    """The :class:`GatewayConfig` of resolved pipeline settings ``s`` (those of its keys that are
    fields; an empty ``api_keys`` means ``RXPIPE_API_KEYS``)."""
    values = {name: s[name] for name in schema_of(GatewayConfig) if name in s}
    if "api_keys" in values:
        values["api_keys"] = parse_api_keys(values["api_keys"] or os.environ.get("RXPIPE_API_KEYS"))
    return GatewayConfig(**values)
