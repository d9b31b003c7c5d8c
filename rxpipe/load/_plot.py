"""``rxpipe load --plot``: the per-second series as a three-panel PNG (matplotlib, the ``plot`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["PlotUnavailable", "write_plot", "FIGURE_PX", "INSTALL_HINT"]

#: the PNG's size in pixels (width, height)
FIGURE_PX = (1200, 900)
_DPI = 100
INSTALL_HINT = "pip install matplotlib (or, in the rxpipe checkout: pip install -e '.[plot]')"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed; the message says how to install it."""


def write_plot(figures: dict[str, Any], path: str | Path, title: str | None = None) -> None:
    """Draw ``figures["series"]`` into a PNG at ``path`` of :data:`FIGURE_PX` pixels.

    Top: offered requests/s with admitted (2xx), 429, 503 and timeouts stacked against it. Middle:
    latency p50/p99 (ms) of the 2xx answers sent in each second. Bottom: the server's queue and
    running count (when its /metrics said). Raises PlotUnavailable without matplotlib.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable(f"--plot needs matplotlib: {INSTALL_HINT}") from None
    series = figures["series"]
    t = [p["t"] for p in series]
    fig, (top, middle, bottom) = plt.subplots(3, 1, sharex=True, figsize=(FIGURE_PX[0] / _DPI, FIGURE_PX[1] / _DPI),
                                              dpi=_DPI, constrained_layout=True)
    fig.suptitle(title or _title(figures))
    top.stackplot(t, [p["admitted"] for p in series], [p["r429"] for p in series], [p["r503"] for p in series],
                  [p["timeout"] + p["other"] for p in series],
                  labels=["admitted (2xx)", "429", "503", "timeout / other"],
                  colors=["#2ca02c", "#ff7f0e", "#d62728", "#7f7f7f"], alpha=0.8, step="post")
    top.step(t, [p["offered"] for p in series], where="post", color="black", linewidth=1.2, label="offered")
    top.set_ylabel("requests / s")
    top.legend(loc="upper left", fontsize="small", ncol=5)
    top.grid(alpha=0.3)
    for key, label, style in (("latency_p50_ms", "p50", "-"), ("latency_p99_ms", "p99", "--")):
        middle.plot(t, [p[key] for p in series], style, label=f"latency {label} (2xx)", color="#1f77b4")
    middle.set_ylabel("latency (ms)")
    middle.set_ylim(bottom=0)
    middle.legend(loc="upper left", fontsize="small")
    middle.grid(alpha=0.3)
    if any(p["queue"] is not None for p in series):
        bottom.plot(t, [p["queue"] for p in series], label="server queue (admitted, not running)", color="#9467bd")
        bottom.plot(t, [p["running"] for p in series], label="engine running", color="#8c564b")
        bottom.legend(loc="upper left", fontsize="small")
    else:
        bottom.text(0.5, 0.5, "the server's /metrics gave no queue length", ha="center", va="center",
                    transform=bottom.transAxes)
    bottom.set_ylabel("requests")
    bottom.set_xlabel("seconds since start")
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    fig.savefig(path, dpi=_DPI)
    plt.close(fig)


def _title(figures: dict[str, Any]) -> str:
    config = figures.get("config", {})
    rate = config.get("rate") or [0, 0]
    offered = f"{rate[0]:g}" if rate[0] == rate[1] else f"{rate[0]:g}→{rate[1]:g}"
    return (f"rxpipe load: {offered} req/s for {config.get('duration', 0):g} s — "
            f"{figures['completed']} ok, shed {figures['shed_fraction']:.0%}")
