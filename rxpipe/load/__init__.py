"""``rxpipe load``: an open-loop load generator for OpenAI-compatible servers (DESIGN §6).

It speaks the language of ``vllm bench serve`` (the same arrival process, the same TTFT, TPOT,
ITL and E2EL definitions and key names) and reports what those tools do not: refusals by code
and reason, shed fraction, rejection latency, the Retry-After the server asked for, and a
per-second series with the server's queue and running count read from its ``/metrics``.

    result = await run_load(LoadConfig("http://127.0.0.1:8000", rate=(1, 50), duration_s=60))
    print(format_table(result.figures))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._arrivals import arrival_times, rate_at
    from ._client import OUTCOMES, Attempt, RequestRecord, retry_after_s
    from ._plot import FIGURE_PX, INSTALL_HINT, PlotUnavailable, write_plot
    from ._prompts import Prompt, default_prompts, parse_prompts, read_prompts
    from ._report import format_table, write_json
    from ._runner import LoadConfig, LoadResult, normalize_base_url, run_load
    from ._scrape import parse_queue_running
    from ._stats import DEFINITIONS, per_second, summarize, summarize_latencies

__all__ = [
    "LoadConfig", "LoadResult", "run_load", "normalize_base_url", "arrival_times", "rate_at", "OUTCOMES",
    "Attempt", "RequestRecord", "retry_after_s", "Prompt", "default_prompts", "parse_prompts", "read_prompts",
    "format_table", "write_json", "write_plot", "PlotUnavailable", "FIGURE_PX", "INSTALL_HINT",
    "parse_queue_running", "DEFINITIONS", "per_second", "summarize", "summarize_latencies",
]


# Loaded on first use (PEP 562): ``rxpipe`` (the CLI) registers the load command without paying for aiohttp,
# hdrhistogram and friends on every ``rxpipe run``.
_WHERE = {
    name: module
    for module, names in (
        ("_arrivals", "arrival_times rate_at"),
        ("_client", "OUTCOMES Attempt RequestRecord retry_after_s"),
        ("_plot", "FIGURE_PX INSTALL_HINT PlotUnavailable write_plot"),
        ("_prompts", "Prompt default_prompts parse_prompts read_prompts"),
        ("_report", "format_table write_json"),
        ("_runner", "LoadConfig LoadResult normalize_base_url run_load"),
        ("_scrape", "parse_queue_running"),
        ("_stats", "DEFINITIONS per_second summarize summarize_latencies"),
    )
    for name in names.split()
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'rxpipe.load' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
