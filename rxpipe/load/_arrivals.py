"""Open-loop arrival times: Poisson or gamma inter-arrivals at a constant or linearly ramped rate.

Semantics of ``vllm bench serve``'s ``--request-rate``/``--burstiness``: inter-arrival times follow
a gamma distribution of shape ``burstiness`` and mean ``1 / rate`` (``burstiness=1`` is a Poisson
process; below 1 burstier, above 1 more regular). A ramp ``a:b`` raises the rate linearly from
``a`` to ``b`` requests/s over the duration; its arrivals are a non-homogeneous process made by
time rescaling: unit-mean gamma gaps on the cumulative intensity ``Λ(t) = a·t + (b−a)·t²/(2·D)``,
mapped back through ``Λ⁻¹``, so the expected count in any window is the integral of the rate.
"""

from __future__ import annotations

import math
import random

__all__ = ["arrival_times", "rate_at"]


def rate_at(t_s: float, duration_s: float, rate: tuple[float, float]) -> float:
    """The offered rate (requests/s) at ``t_s`` seconds into a run of ``duration_s`` seconds with
    ``rate = (start, end)`` (equal for a constant rate)."""
    start, end = rate
    return start + (end - start) * min(max(t_s / duration_s, 0.0), 1.0)


def arrival_times(duration_s: float, rate: tuple[float, float], burstiness: float = 1.0,
                  rng: random.Random | None = None) -> list[float]:
    """Arrival offsets (seconds from the start, increasing, all in ``[0, duration_s)``).

    Args: duration_s (> 0); rate (start, end) in requests/s, both > 0 (equal: constant rate);
        burstiness (> 0, the gamma shape); rng (seeded for a reproducible schedule).
    Raises: ValueError for a non-positive duration, rate or burstiness.
    """
    start, end = rate
    if not duration_s > 0:
        raise ValueError(f"duration must be > 0 seconds, got {duration_s!r}")
    if not (start > 0 and end > 0):
        raise ValueError(f"rates must be > 0 requests/s, got {start!r}:{end!r}")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0, got {burstiness!r}")
    rng = rng or random.Random()
    slope = (end - start) / duration_s  # requests/s per second

    def inverse(intensity: float) -> float:
        if slope == 0:
            return intensity / start
        return (math.sqrt(start * start + 2.0 * slope * intensity) - start) / slope

    times: list[float] = []
    cumulative = 0.0
    while True:
        cumulative += rng.gammavariate(burstiness, 1.0 / burstiness)  # unit-mean gap in Λ-space
        t = inverse(cumulative)
        if t >= duration_s:
            return times
        times.append(t)
