"""One logical request of ``rxpipe load``: send it, measure it as ``vllm bench serve`` does, and
retry refusals the way the OpenAI SDKs do.

Timing (vLLM's ``endpoint_request_func``): the clock starts when the attempt is sent; with
``stream`` every SSE event that carries ``choices`` is a token chunk: the first one sets TTFT,
each later one appends the gap since the previous one to ITL, and E2EL ends at the last token
chunk (the trailing usage-only event and ``[DONE]`` do not count). Without ``stream`` E2EL ends
when the body has been read, and TTFT/ITL are not measured. The output token count is the
server's ``usage.completion_tokens`` (we ask for it with ``stream_options.include_usage``), else
the number of token chunks.

Retries (``--retry N``): a 429 or 503 is retried up to N times after the delay the server asked
for: ``retry-after-ms`` (milliseconds), else ``Retry-After`` (seconds or an HTTP date), honoured
when it is in (0, 60] s as the ``openai`` SDK does; otherwise the SDK's backoff,
``min(0.5 · 2^k, 8) s`` with up to 25 % jitter. Timeouts and other errors are not retried.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from ._aimd import parse_room
from ._prompts import Prompt

__all__ = ["Attempt", "RequestRecord", "RequestSpec", "send", "retry_after_s", "OUTCOMES"]

#: final outcomes of a request; they add up to the requests sent
OUTCOMES = ("2xx", "429", "503", "other", "timeout")

_MAX_HONOURED_S = 60.0


@dataclass(slots=True)
class Attempt:
    """One HTTP attempt. Times are seconds on the run's clock (0 = start of the run)."""

    sent_s: float
    kind: str = "other"  # one of OUTCOMES
    status: int | None = None
    latency_s: float = 0.0  # until the answer (or the error) was complete
    reason: str | None = None  # the error ``code`` of a 429/503 body (e.g. queue_full), else None
    retry_after_s: float | None = None  # the delay the server asked for (429/503), seconds
    error: str | None = None
    room: int | None = None  # the admissions the answer's head said the server would take (credit headers)


@dataclass(slots=True)
class RequestRecord:
    """A logical request: its scheduled arrival, every attempt, and the successful attempt's
    measurements (vLLM's definitions, see the module docstring)."""

    index: int
    arrival_s: float
    attempts: list[Attempt] = field(default_factory=list)
    done_s: float | None = None  # when its last attempt ended (run clock)
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    e2el_s: float | None = None
    prompt_tokens: int = 0
    output_tokens: int = 0

    @property
    def outcome(self) -> str:
        """The kind of the last attempt (``"other"`` if none was made)."""
        return self.attempts[-1].kind if self.attempts else "other"

    @property
    def tpot_s(self) -> float | None:
        """(E2EL − TTFT) / (output tokens − 1): the first token excluded; None under 2 tokens."""
        if self.ttft_s is None or self.e2el_s is None or self.output_tokens < 2:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """What every request of a run shares."""

    url: str  # the full endpoint URL
    model: str
    chat: bool
    stream: bool
    max_tokens: int
    timeout_s: float
    retries: int
    api_key: str | None = None


def retry_after_s(headers: Any) -> float | None:
    """The delay (seconds) a 429/503 asks for: ``retry-after-ms``, else ``Retry-After`` as
    delta-seconds or an HTTP date (RFC 9110 §10.2.3); None if absent or unparsable."""
    raw = headers.get("retry-after-ms")
    if raw is not None:
        try:
            return float(raw) / 1000.0
        except ValueError:
            pass
    raw = headers.get("Retry-After")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _backoff_s(retry: int, asked_s: float | None, rng: random.Random) -> float:
    if asked_s is not None and 0 < asked_s <= _MAX_HONOURED_S:
        return asked_s
    return min(0.5 * 2 ** retry, 8.0) * (1 - 0.25 * rng.random())


def _body(spec: RequestSpec, prompt: Prompt) -> bytes:
    body: dict[str, Any] = {"model": spec.model, "max_tokens": prompt.max_tokens or spec.max_tokens}
    if spec.chat:
        body["messages"] = list(prompt.messages) if prompt.messages is not None else [
            {"role": "user", "content": prompt.prompt or ""}]
    else:
        body["prompt"] = prompt.prompt if prompt.prompt is not None else " ".join(
            str(m.get("content", "")) for m in prompt.messages or ())
    if spec.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


async def send(session: aiohttp.ClientSession, spec: RequestSpec, prompt: Prompt, record: RequestRecord,
               clock: float, rng: random.Random) -> RequestRecord:
    """Run ``record``'s attempts (at most ``1 + spec.retries``) and fill it in. Never raises for
    HTTP or network failures: they become the attempt's ``kind``. ``clock`` is the run's start on
    ``time.perf_counter()``."""
    body = _body(spec, prompt)
    # one id per logical request, the same on its retries: the server's log can tell them apart
    headers = {"Content-Type": "application/json", "x-request-id": f"rxpipe-load-{record.index}"}
    if spec.api_key:
        headers["Authorization"] = f"Bearer {spec.api_key}"
    timeout = aiohttp.ClientTimeout(total=spec.timeout_s)
    for retry in range(spec.retries + 1):
        attempt = Attempt(sent_s=time.perf_counter() - clock)
        record.attempts.append(attempt)
        await _attempt(session, spec, body, headers, timeout, record, attempt, clock)
        if attempt.kind not in ("429", "503") or retry == spec.retries:
            break
        await asyncio.sleep(_backoff_s(retry, attempt.retry_after_s, rng))
    record.done_s = time.perf_counter() - clock
    return record


async def _attempt(session: aiohttp.ClientSession, spec: RequestSpec, body: bytes, headers: dict[str, str],
                   timeout: aiohttp.ClientTimeout, record: RequestRecord, attempt: Attempt, clock: float) -> None:
    start = clock + attempt.sent_s
    try:
        async with session.post(spec.url, data=body, headers=headers, timeout=timeout) as response:
            attempt.status = response.status
            attempt.room = parse_room(response.headers)
            if response.status in (429, 503):
                attempt.kind = str(response.status)
                attempt.retry_after_s = retry_after_s(response.headers)
                attempt.reason = _error_code(await response.read())
            elif 200 <= response.status < 300:
                if spec.stream:
                    await _read_stream(response, record, attempt, start)
                else:
                    await _read_json(response, record, attempt, start)
            else:
                attempt.kind = "other"
                attempt.error = f"HTTP {response.status}"
                await response.read()
    except TimeoutError:
        attempt.kind = "timeout"
        attempt.error = f"no complete answer within {spec.timeout_s:g} s"
    except (aiohttp.ClientError, OSError, ValueError) as error:
        attempt.kind = "other"
        attempt.error = f"{type(error).__name__}: {error}"
    if not attempt.latency_s:
        attempt.latency_s = time.perf_counter() - start
    if attempt.kind != "2xx":  # what a failed attempt measured is not the request's
        record.ttft_s, record.itl_s, record.e2el_s = None, [], None


def _error_code(raw: bytes) -> str | None:
    try:
        error = orjson.loads(raw).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) and code else None


async def _read_json(response: aiohttp.ClientResponse, record: RequestRecord, attempt: Attempt,
                     start: float) -> None:
    data = orjson.loads(await response.read())
    now = time.perf_counter()
    if not isinstance(data, dict) or not data.get("choices"):
        attempt.kind, attempt.error = "other", "a 2xx answer without choices"
        return
    usage = data.get("usage") or {}
    record.output_tokens = int(usage.get("completion_tokens") or 0)
    record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    record.e2el_s = attempt.latency_s = now - start
    attempt.kind = "2xx"


async def _read_stream(response: aiohttp.ClientResponse, record: RequestRecord, attempt: Attempt,
                       start: float) -> None:
    first: float | None = None
    last = start
    chunks = 0
    usage: dict[str, Any] = {}
    failed: str | None = None
    async for line in response.content:
        if not line.startswith(b"data:"):
            continue  # blank separators, SSE comments (pings), other fields
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        data = orjson.loads(payload)
        if not isinstance(data, dict):
            continue
        if "error" in data:
            failed = str((data["error"] or {}).get("code") or "stream error event")
            continue
        if data.get("choices"):
            now = time.perf_counter()
            if first is None:
                first = now
                record.ttft_s = now - start
            else:
                record.itl_s.append(now - last)
            last = now
            chunks += 1
        elif data.get("usage"):
            usage = data["usage"]
    attempt.latency_s = time.perf_counter() - start
    if failed is not None or first is None:
        attempt.kind = "other"
        attempt.error = failed or "the stream carried no token"
        record.ttft_s, record.itl_s = None, []
        return
    record.e2el_s = last - start
    record.output_tokens = int(usage.get("completion_tokens") or chunks)
    record.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    attempt.kind = "2xx"
