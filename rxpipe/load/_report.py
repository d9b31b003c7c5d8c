"""The result table printed by ``rxpipe load`` and its ``--json`` file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from ._client import OUTCOMES
from ._stats import DEFINITIONS

__all__ = ["format_table", "write_json"]

_WIDTH = 50


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def format_table(figures: dict[str, Any]) -> str:
    """The figures as a text table in the layout of ``vllm bench serve``'s result, plus the
    refusal figures none of the usual tools report."""
    lines = [" rxpipe load result ".center(_WIDTH, "=")]

    def row(label: str, value: Any) -> None:
        lines.append(f"{label:<40} {_fmt(value)}")

    def section(title: str) -> None:
        lines.append(f" {title} ".center(_WIDTH, "-"))

    config = figures.get("config", {})
    rate = config.get("rate")
    aimd = figures.get("aimd")
    if aimd is not None:
        row("AIMD window (final, requests):", aimd["final_window"])
        row("AIMD increases / decreases:", f"{aimd['increases']} / {aimd['decreases']}")
    elif rate:
        row("Offered rate (req/s):", f"{rate[0]:g}" if rate[0] == rate[1] else f"{rate[0]:g} -> {rate[1]:g}")
    row("Requests sent:", figures["sent"])
    row("Successful requests:", figures["completed"])
    row("Failed requests:", figures["failed"])
    row("Benchmark duration (s):", figures["duration"])
    row("Total input tokens:", figures["total_input_tokens"])
    row("Total generated tokens:", figures["total_output_tokens"])
    row("Request throughput (req/s):", figures["request_throughput"])
    if figures["request_goodput"] is not None:
        row("Request goodput (req/s):", figures["request_goodput"])
    row("Output token throughput (tok/s):", figures["output_throughput"])
    row("Total token throughput (tok/s):", figures["total_token_throughput"])
    for name, title in (("ttft", "Time to First Token"), ("tpot", "Time per Output Token (excl. 1st token)"),
                        ("itl", "Inter-token Latency"), ("e2el", "End-to-end Latency"),
                        ("client_e2el", "Client latency (retries included)")):
        if figures.get(f"mean_{name}_ms") is None:
            continue
        section(title)
        short = name.upper() if name != "client_e2el" else "client E2EL"
        row(f"Mean {short} (ms):", figures[f"mean_{name}_ms"])
        row(f"Median {short} (ms):", figures[f"median_{name}_ms"])
        row(f"P99 {short} (ms):", figures[f"p99_{name}_ms"])
    section("Refusals and outcomes")
    outcomes = figures["outcomes"]
    row("Outcomes " + "/".join(OUTCOMES) + ":", " / ".join(str(outcomes[o]) for o in OUTCOMES))
    row("Attempts (retries included):", figures["attempts"])
    for code in ("429", "503"):
        reasons = figures["refusals"][code]
        if reasons:
            row(f"{code} answers by reason:", ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))
    row("Shed fraction:", f"{figures['shed_fraction']:.3f}")
    rejection = figures["rejection_latency_ms"]
    row("Rejection latency p50 / p99 (ms):", f"{_fmt(rejection['p50'])} / {_fmt(rejection['p99'])}")
    asked = figures["retry_after_s"]
    if asked["count"]:
        row("Retry-After min / p50 / p99 / max (s):",
            " / ".join(_fmt(asked[k]) for k in ("min", "p50", "p99", "max")))
    lines.append("=" * _WIDTH)
    return "\n".join(lines)


def write_json(figures: dict[str, Any], path: str | Path) -> None:
    """Write the figures with their written definitions (key ``definitions``) to ``path``."""
    Path(path).write_bytes(orjson.dumps({**figures, "definitions": DEFINITIONS},
                                        option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
