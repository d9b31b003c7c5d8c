"""``rxpipe top URL``: the live pipeline view in a terminal (rich).

Reads ``URL/pipeline.json`` every ``interval_s`` seconds and draws one table: a row per stage
(upstream first) with a bar of its busy / backpressured / idle shares in Flink's colours, the
three figures in ms per second, items in and out per second, demand, requested and held; the
bottleneck's row marked; then the engines' slots and the tenants' counters.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import aiohttp
import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

__all__ = ["render", "run_top", "BAR_WIDTH"]

#: characters of a stage's ratio bar
BAR_WIDTH = 20
_UNBOUNDED = 2**63 - 1


def _bar(stage: dict[str, Any]) -> Text:
    busy = round(stage["busy_ms_per_s"] * BAR_WIDTH / 1000)
    bp = round(stage["backpressured_ms_per_s"] * BAR_WIDTH / 1000)
    bar = Text()
    bar.append("█" * busy, style="red")
    bar.append("█" * bp, style="grey30")
    bar.append("█" * (BAR_WIDTH - busy - bp), style="steel_blue1")
    return bar


def _count(value: int) -> str:
    return "∞" if value >= _UNBOUNDED else str(value)


def render(snapshot: dict[str, Any], url: str) -> Group:
    """The renderable of one snapshot (a ``/pipeline.json`` body) fetched from ``url``."""
    neck = snapshot.get("bottleneck")
    stages = Table(title=f"rxpipe top · {url} · bottleneck: {neck if neck is not None else 'none'}",
                   title_justify="left", expand=False)
    for column, justify in (("stage", "left"), ("kind", "left"), ("busy / bp / idle", "left"),
                            ("busy", "right"), ("bp", "right"), ("idle", "right"), ("in/s", "right"),
                            ("out/s", "right"), ("demand", "right"), ("req", "right"), ("held", "right")):
        stages.add_column(column, justify=justify)  # type: ignore[arg-type]
    for s in snapshot["stages"]:
        marked = s["name"] == neck
        name = Text(("▶ " if marked else "  ") + s["name"], style="bold red" if marked else "")
        stages.add_row(name, s["kind"], _bar(s), str(s["busy_ms_per_s"]), str(s["backpressured_ms_per_s"]),
                       str(s["idle_ms_per_s"]), f"{s['in_per_s']:g}", f"{s['out_per_s']:g}", _count(s["demand"]),
                       _count(s["requested"]), str(s["held"]))
    parts: list[Any] = [stages]
    if snapshot.get("engines"):
        engines = Table(title="engines", title_justify="left")
        for column in ("engine", "running", "waiting", "free slots"):
            engines.add_column(column, justify="left" if column == "engine" else "right")
        for e in snapshot["engines"]:
            engines.add_row(e["name"], str(e["running"]), str(e["waiting"]), str(e["free_slots"]))
        parts.append(engines)
    if snapshot.get("tenants"):
        tenants = Table(title="tenants", title_justify="left")
        for column in ("tenant", "vtc", "queued"):
            tenants.add_column(column, justify="left" if column == "tenant" else "right")
        for t in snapshot["tenants"]:
            tenants.add_row(t["name"], f"{t['vtc']:g}", str(t["queued"]))
        parts.append(tenants)
    parts.append(Text("ms per second over the last 1–2 s; red busy, grey backpressured, blue idle", style="dim"))
    return Group(*parts)


async def _fetch(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url.rstrip("/") + "/pipeline.json") as response:
        if response.status != 200:
            raise RuntimeError(f"{url}/pipeline.json answered {response.status}")
        body: dict[str, Any] = orjson.loads(await response.read())
        return body


async def _follow(url: str, interval_s: float, count: int | None, console: Console) -> int:
    timeout = aiohttp.ClientTimeout(total=max(5.0, 2 * interval_s))
    async with aiohttp.ClientSession(timeout=timeout) as session:
        if count == 1:  # one snapshot, printed (no live region): for scripts and pipes
            console.print(render(await _fetch(session, url), url))
            return 0
        shown = 0
        with Live(console=console, auto_refresh=False) as live:
            while count is None or shown < count:
                try:
                    live.update(render(await _fetch(session, url), url), refresh=True)
                except (TimeoutError, aiohttp.ClientError, RuntimeError, ValueError) as error:
                    live.update(Text(f"rxpipe top: {url}: {error or type(error).__name__}; retrying", style="red"),
                                refresh=True)
                shown += 1
                if count is None or shown < count:
                    await asyncio.sleep(interval_s)
    return 0


def run_top(url: str, interval_s: float = 1.0, count: int | None = None) -> int:
    """Follow the view at ``url`` for ``count`` snapshots (None: until interrupted); 0, or 1 with
    the reason on stderr when a single snapshot cannot be had."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 132))  # a pipe or a file: no line cut short
    try:
        return asyncio.run(_follow(url, interval_s, count, console))
    except KeyboardInterrupt:
        return 0
    except (TimeoutError, aiohttp.ClientError, RuntimeError, ValueError, OSError) as error:
        print(f"rxpipe top: error: {url}: {error or type(error).__name__}", file=sys.stderr)
        return 1
