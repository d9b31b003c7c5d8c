"""Drive one ``rxpipe load`` run: the open-loop schedule, one task per request, the per-second
scrape of the server's ``/metrics``, and the live progress line."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import aiohttp
import orjson

from ._aimd import AimdConfig, AimdGate
from ._arrivals import arrival_times
from ._client import RequestRecord, RequestSpec, send
from ._prompts import Prompt, default_prompts
from ._scrape import scrape
from ._stats import Goodput, per_second, summarize

__all__ = ["LoadConfig", "LoadResult", "run_load", "normalize_base_url"]


def normalize_base_url(url: str) -> str:
    """``http://host:port`` from what a user may type (a trailing ``/`` or ``/v1`` is dropped)."""
    url = url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


@dataclass(frozen=True)
class LoadConfig:
    """Settings of one run (the ``rxpipe load`` options; units in the names).

    base_url: the server, e.g. ``http://127.0.0.1:8000``. rate: (start, end) requests/s, equal for
    a constant rate. duration_s: length of the sending window. burstiness: gamma shape (1 =
    Poisson). model: None asks ``GET /v1/models`` for the first id. chat: use
    ``/v1/chat/completions``. goodput: objectives in ms by name (ttft, tpot, e2el). seed: makes the
    schedule, the prompt choice and retry jitter reproducible. scrape: read ``/metrics`` each second.
    aimd: closed loop instead of the schedule (``rate`` unused): requests are sent while the AIMD
    window (:mod:`rxpipe.load._aimd`, read from the server's credit headers) has room, for
    ``duration_s``.
    """

    base_url: str = "http://127.0.0.1:8000"
    rate: tuple[float, float] = (1.0, 1.0)
    duration_s: float = 10.0
    burstiness: float = 1.0
    stream: bool = False
    chat: bool = False
    max_tokens: int = 64
    prompts: tuple[Prompt, ...] = ()
    model: str | None = None
    api_key: str | None = None
    timeout_s: float = 30.0
    retries: int = 0
    goodput: Goodput | None = None
    seed: int = 0
    scrape: bool = True
    aimd: AimdConfig | None = None


@dataclass
class LoadResult:
    """What a run produced: every request, the server's (queue, running) per second, and the
    JSON-ready figures (:func:`rxpipe.load.summarize` plus ``series`` and the configuration)."""

    records: list[RequestRecord]
    scrapes: list[tuple[float | None, float | None]]
    figures: dict[str, Any] = field(default_factory=dict)


#: progress callback: (elapsed s, duration s, records so far, requests in flight)
Progress = Callable[[float, float, list[RequestRecord], int], None]


class _ModelsRefused(Exception):
    """``GET /v1/models`` answered other than 200; ``detail`` is its error's code and message."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status = status
        try:
            error = orjson.loads(body)["error"]
            self.detail = f"{error.get('code')}: {error.get('message')}"
        except (ValueError, KeyError, TypeError, AttributeError):
            self.detail = body[:200].decode("utf-8", "replace") or "no body"


async def _first_model(session: aiohttp.ClientSession, base_url: str, headers: dict[str, str]) -> str:
    try:
        async with session.get(f"{base_url}/v1/models", headers=headers,
                               timeout=aiohttp.ClientTimeout(total=10)) as response:
            body = await response.read()
            status = response.status
            if status != 200:  # e.g. 401 from a server with keys: the fix is --api-key, not --model
                raise _ModelsRefused(status, body)
            data = orjson.loads(body)
            return str(data["data"][0]["id"])
    except _ModelsRefused as refused:
        raise RuntimeError(f"{base_url}/v1/models answered HTTP {refused.status} ({refused.detail}); pass "
                           f"{'--api-key' if refused.status in (401, 403) else '--model'}") from None
    except (aiohttp.ClientConnectionError, OSError, TimeoutError) as error:
        # nothing answered: no --model would help
        why = getattr(error, "os_error", None) or error
        reason = ("connection refused" if getattr(why, "errno", None) == errno.ECONNREFUSED
                  else "no answer in time" if isinstance(why, TimeoutError)
                  else getattr(why, "strerror", None) or type(why).__name__)
        raise RuntimeError(f"cannot reach {base_url} ({reason}): is the server running? (e.g. rxpipe run "
                           f"pipelines/llm_gateway.py, then rxpipe load {base_url})") from None
    except (aiohttp.ClientError, ValueError, KeyError, IndexError, TypeError) as error:
        raise RuntimeError(f"could not read the model id from {base_url}/v1/models ({type(error).__name__}: "
                           f"{error}); pass --model") from None


async def run_load(config: LoadConfig, progress: Progress | None = None) -> LoadResult:
    """Run the load described by ``config`` and return its :class:`LoadResult`.

    Requests are sent open-loop at the scheduled times whatever the answers (a slow server does
    not slow the sender); after the window every request in flight is awaited (each is bounded by
    ``(1 + retries) × (timeout_s + 60 s)``). Raises RuntimeError when no model id can be found.
    """
    base = normalize_base_url(config.base_url)
    rng = random.Random(config.seed)
    times = arrival_times(config.duration_s, config.rate, config.burstiness, rng) if config.aimd is None else []
    prompts = list(config.prompts) or default_prompts()
    chosen = [prompts[rng.randrange(len(prompts))] for _ in times]
    gate = AimdGate(config.aimd) if config.aimd is not None else None
    window_series: list[float] = []
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    seconds = math.ceil(config.duration_s)
    scrapes: list[tuple[float | None, float | None]] = [(None, None)] * seconds
    records = [RequestRecord(index, t) for index, t in enumerate(times)]
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        model = config.model or await _first_model(session, base, headers)
        spec = RequestSpec(f"{base}/v1/chat/completions" if config.chat else f"{base}/v1/completions", model,
                           config.chat, config.stream, config.max_tokens, config.timeout_s, config.retries,
                           config.api_key)
        clock = time.perf_counter()
        in_flight: set[asyncio.Task[RequestRecord]] = set()

        async def scraper() -> None:
            for t in range(seconds):
                delay = clock + t + 0.5 - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                scrapes[t] = await scrape(session, f"{base}/metrics", headers=headers)

        async def reporter() -> None:
            assert progress is not None
            while True:
                progress(time.perf_counter() - clock, config.duration_s, records, len(in_flight))
                await asyncio.sleep(0.25)

        helpers = []
        if config.scrape:
            helpers.append(asyncio.ensure_future(scraper()))
        if progress is not None:
            helpers.append(asyncio.ensure_future(reporter()))
        try:
            if gate is not None:
                await _closed_loop(gate, session, spec, prompts, records, in_flight, clock, rng, config.duration_s,
                                   window_series)
            for record, prompt in zip(records if gate is None else [], chosen, strict=True):
                delay = clock + record.arrival_s - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.ensure_future(send(session, spec, prompt, record, clock, rng))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
            if in_flight:
                await asyncio.gather(*in_flight)
            if config.scrape:
                await helpers[0]
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            leftover = list(in_flight)  # only when interrupted: the normal path awaited them all
            for task in leftover:
                task.cancel()
            await asyncio.gather(*leftover, return_exceptions=True)
        ends = [r.done_s for r in records if r.done_s is not None]
        duration = max(ends) if ends else time.perf_counter() - clock
        if progress is not None:
            progress(time.perf_counter() - clock, config.duration_s, records, 0)
    figures = summarize(records, duration, config.goodput)
    figures["series"] = per_second(records, seconds, scrapes)
    figures["config"] = {
        "base_url": base, "model": model, "endpoint": spec.url[len(base):], "rate": list(config.rate),
        "duration": config.duration_s, "burstiness": config.burstiness, "stream": config.stream,
        "max_tokens": config.max_tokens, "timeout": config.timeout_s, "retry": config.retries,
        "goodput": config.goodput, "seed": config.seed,
    }
    if gate is not None and config.aimd is not None:
        figures["config"]["aimd"] = dataclasses.asdict(config.aimd)
        figures["aimd"] = {"window_per_s": window_series, "final_window": round(gate.window, 3),
                           "increases": gate.increases, "decreases": gate.decreases}
    return LoadResult(records, scrapes, figures)


async def _closed_loop(gate: AimdGate, session: aiohttp.ClientSession, spec: RequestSpec, prompts: list[Prompt],
                       records: list[RequestRecord], in_flight: set[asyncio.Task[RequestRecord]], clock: float,
                       rng: random.Random, duration_s: float, window_series: list[float]) -> None:
    """``--aimd``: send while the gate is open, for ``duration_s``; each answer moves the window.
    ``window_series`` gets the window at the end of each second."""
    wake = asyncio.Event()
    end = clock + duration_s
    next_sample = clock + 1.0

    def finished(seq: int, task: asyncio.Task[RequestRecord]) -> None:
        in_flight.discard(task)
        attempt = task.result().attempts[-1] if not task.cancelled() and task.result().attempts else None
        gate.answered(seq, attempt.status if attempt is not None else None,
                      attempt.room if attempt is not None else None)
        wake.set()

    while (now := time.perf_counter()) < end:
        while now >= next_sample:
            window_series.append(round(gate.window, 3))
            next_sample += 1.0
        if not gate.open:
            wake.clear()
            try:
                await asyncio.wait_for(wake.wait(), timeout=min(end, next_sample) - now)
            except TimeoutError:
                pass
            continue
        record = RequestRecord(len(records), now - clock)
        records.append(record)
        seq = gate.sent()
        task = asyncio.ensure_future(send(session, spec, prompts[rng.randrange(len(prompts))], record, clock, rng))
        in_flight.add(task)
        task.add_done_callback(functools.partial(finished, seq))
    while len(window_series) < math.ceil(duration_s):
        window_series.append(round(gate.window, 3))
