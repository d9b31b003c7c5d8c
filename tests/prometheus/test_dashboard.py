"""dashboards/rxpipe.json: a valid Grafana (classic model) dashboard whose every panel query has
data in a real Prometheus scraping the gateway under load."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from .conftest import Stack

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "rxpipe.json"


def load_dashboard() -> dict[str, Any]:
    return dict(orjson.loads(DASHBOARD.read_bytes()))


def targets() -> list[tuple[str, str]]:
    return [(f"{panel['title']} / {target['refId']}", target["expr"])
            for panel in load_dashboard()["panels"] for target in panel["targets"]]


def test_the_dashboard_is_importable_and_covers_the_issue() -> None:
    dashboard = load_dashboard()
    assert dashboard["__inputs"][0]["name"] == "DS_PROMETHEUS" and dashboard["__inputs"][0]["pluginId"] == "prometheus"
    panels = dashboard["panels"]
    assert [p["id"] for p in panels] == list(range(1, len(panels) + 1))
    assert all(p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"} for p in panels)
    assert [p["title"] for p in panels] == [
        "Demand per stage", "Buffer fill per stage", "Answers: 2xx / 429 / 503", "Refusals by reason",
        "Request latency p50 / p99", "Time to first token p50 / p99", "Engine running / waiting",
        "Admitted requests by outcome"]
    for panel in panels:  # the grid: 24 columns, no overlap
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
    cells = [(p["gridPos"]["x"], p["gridPos"]["y"]) for p in panels]
    assert len(set(cells)) == len(cells)


@pytest.mark.parametrize(("name", "expr"), targets())
def test_every_panel_query_has_data(stack: Stack, name: str, expr: str) -> None:
    result = stack.prometheus.query(expr)
    assert result, f"{name}: {expr} returned no series"
    assert any(math.isfinite(float(sample["value"][1])) for sample in result), f"{name}: {expr} -> {result}"
