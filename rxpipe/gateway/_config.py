"""Configuration of the HTTP edge (DESIGN §5–6)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields

__all__ = ["GatewayConfig", "parse_api_keys"]


def parse_api_keys(value: str | int | float | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"k1,k2"`` or a list → a tuple of non-empty, stripped keys (empty: no auth)."""
    if value is None:
        return ()
    if isinstance(value, (int, float)):  # --set api_keys=12345 parses as JSON: a number
        value = str(value)
    items = value.split(",") if isinstance(value, str) else list(value)
    keys = tuple(str(k).strip() for k in items if str(k).strip())
    return keys


@dataclass(frozen=True)
class GatewayConfig:
    """Settings of :class:`~rxpipe.gateway.Gateway`.

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
    retry_after_min_s / retry_after_max_s: clamp of every Retry-After (seconds, RFC 9110).
    max_model_len: context length (tokens): prompt tokens (estimated, 1 per 4 UTF-8 bytes) plus
        ``max_tokens`` over it → 400 ``context_length_exceeded`` before admission.
    default_max_tokens: a request without ``max_tokens`` gets what remains of ``max_model_len``,
        capped by this (tokens; None: no cap, as vLLM does).
    max_connections: open connections at most (lowered to what ``ulimit -n`` allows); one over
        it gets 503 and is closed.
    keepalive_timeout_s: an idle keep-alive connection is closed after it (seconds).
    header_timeout_s: a new connection that has not sent a complete request head within it is
        closed (seconds).
    tenants_file: path of a tenants file (JSON, or TOML by its ``.toml`` suffix; schema in
        :class:`~rxpipe.gateway.Tenants`), or None for one tenant. With it, admission is per
        tenant (DESIGN §5 "Many tenants"): auth keys are ``api_keys`` plus every tenant's keys,
        rpm/tpm limits answer with OpenAI's ``x-ratelimit-*`` headers, SIGHUP reloads the file.
    """

    model: str = "sim"
    api_keys: tuple[str, ...] = field(default_factory=lambda: parse_api_keys(os.environ.get("RXPIPE_API_KEYS")))
    key_rate: float | None = None
    key_burst: int = 10
    latency_budget_s: float | None = None
    max_body_bytes: int = 1 << 20
    body_timeout_s: float = 30.0
    max_tokens_limit: int = 32768
    stream_window: int = 2
    stream_buffer_bytes: int = 16384
    retry_after_min_s: float = 1.0
    retry_after_max_s: float = 60.0
    max_model_len: int = 8192
    default_max_tokens: int | None = None
    max_connections: int = 4096
    keepalive_timeout_s: float = 75.0
    header_timeout_s: float = 10.0
    tenants_file: str | None = None

    def __post_init__(self) -> None:
        if not self.model or not isinstance(self.model, str):
            raise ValueError(f"model must be a non-empty string, got {self.model!r}")
        if self.key_rate is not None and not self.key_rate > 0:
            raise ValueError(f"key_rate must be > 0 requests/s (or None), got {self.key_rate!r}")
        if not (isinstance(self.key_burst, int) and self.key_burst >= 1):
            raise ValueError(f"key_burst must be an int >= 1 requests, got {self.key_burst!r}")
        if self.latency_budget_s is not None and not self.latency_budget_s > 0:
            raise ValueError(f"latency_budget_s must be > 0 seconds (or None), got {self.latency_budget_s!r}")
        for name in ("max_body_bytes", "max_tokens_limit", "stream_window", "stream_buffer_bytes", "max_model_len",
                     "max_connections"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("body_timeout_s", "keepalive_timeout_s", "header_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
        dmt = self.default_max_tokens
        if dmt is not None and (isinstance(dmt, bool) or not isinstance(dmt, int) or dmt < 1):
            raise ValueError(f"default_max_tokens must be an int >= 1 tokens (or None), got {dmt!r}")
        if not 1 <= self.retry_after_min_s <= self.retry_after_max_s:
            raise ValueError("need 1 <= retry_after_min_s <= retry_after_max_s")

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}
