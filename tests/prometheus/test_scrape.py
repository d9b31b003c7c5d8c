"""Our /metrics scraped by a real Prometheus, and linted by promtool."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request

import pytest

from .conftest import P99, Stack

STAGES = {"gateway", "rate_limit", "queue", "batch", "executor"}  # pipelines/llm_gateway.py


def test_prometheus_scrapes_the_gateway_and_answers_the_issue_queries(stack: Stack) -> None:
    prometheus = stack.prometheus
    targets = prometheus.get("/api/v1/targets")["data"]["activeTargets"]
    assert [(t["labels"]["job"], t["health"]) for t in targets] == [("rxpipe", "up")]
    demand = prometheus.query("rxpipe_stage_demand")
    assert {sample["metric"]["stage"] for sample in demand} == STAGES  # every stage of the pipeline
    rejections = prometheus.query("rxpipe_rejections_total")
    assert {sample["metric"]["reason"] for sample in rejections} == {
        "queue_full", "rate_limited", "deadline", "unavailable", "draining"}  # at 0 from the start, too
    assert float(next(s for s in rejections if s["metric"]["reason"] == "queue_full")["value"][1]) > 0
    p99 = prometheus.query(P99)
    assert len(p99) == 1 and 0 < float(p99[0]["value"][1]) <= 60.0
    finished = prometheus.query("rxpipe_requests_finished_total")
    assert {sample["metric"]["outcome"] for sample in finished} == {"ok", "error", "stalled", "cancelled"}
    running = prometheus.query("rxpipe_engine_running_seqs")
    assert [sample["metric"]["engine"] for sample in running] == ["sim"]


# CI installs Debian's prometheus (with promtool): there a missing promtool fails instead of skipping
@pytest.mark.skipif(shutil.which("promtool") is None and not os.environ.get("CI"),
                    reason="Debian's promtool is not installed here (.ci/run installs it)")
def test_promtool_finds_nothing_to_lint_in_our_metrics(stack: Stack) -> None:
    with urllib.request.urlopen(f"{stack.gateway.url}/metrics", timeout=10) as response:
        text = response.read()
    assert b"rxpipe_stage_demand" in text and b"rxpipe_requests_finished_total" in text
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert (lint.returncode, lint.stdout, lint.stderr) == (0, b"", b"")
