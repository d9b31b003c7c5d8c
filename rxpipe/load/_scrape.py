"""Read the server's queue length and running count from its Prometheus ``/metrics``.

rxpipe servers: queue = ``sum(rxpipe_stage_buffered_items) + sum(rxpipe_engine_waiting_seqs)``
(requests admitted and not running yet), running = ``sum(rxpipe_engine_running_seqs)``. vLLM:
``vllm:num_requests_waiting`` and ``vllm:num_requests_running``. Parsed with prometheus_client's
text parser; any other server, or a failed scrape, gives ``(None, None)``.
"""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["parse_queue_running", "scrape"]

_QUEUE = ("rxpipe_stage_buffered_items", "rxpipe_engine_waiting_seqs")
_RUNNING = ("rxpipe_engine_running_seqs",)
_VLLM_QUEUE = ("vllm:num_requests_waiting",)
_VLLM_RUNNING = ("vllm:num_requests_running",)


def parse_queue_running(text: str) -> tuple[float | None, float | None]:
    """(queue, running) from an exposition text; None for what the text does not have.
    Raises ValueError for text that is not the Prometheus format."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in _QUEUE + _RUNNING + _VLLM_QUEUE + _VLLM_RUNNING:
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value

    def total(names: tuple[str, ...]) -> float | None:
        found = [sums[name] for name in names if name in sums]
        return sum(found) if found else None

    queue, running = total(_QUEUE), total(_RUNNING)
    if queue is None and running is None:
        queue, running = total(_VLLM_QUEUE), total(_VLLM_RUNNING)
    return queue, running


async def scrape(session: aiohttp.ClientSession, url: str, timeout_s: float = 0.9,
                 headers: dict[str, str] | None = None) -> tuple[float | None, float | None]:
    """GET ``url`` (the server's ``/metrics``) and parse it; ``(None, None)`` on any failure."""
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            if response.status != 200:
                return None, None
            return parse_queue_running(await response.text())
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
        return None, None
