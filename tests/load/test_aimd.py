"""``rxpipe load --aimd``: the AIMD gate's rules, exactly, and the closed loop end to end against a
real gateway whose credit headers it reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from rxpipe.load._aimd import AimdConfig, AimdGate, parse_room

from ..gateway.server import GatewayProcess
from .test_cli import load


def test_increase_per_success_with_room_hold_at_one_decrease_once_per_window() -> None:
    start = AimdGate(AimdConfig(initial=1.0))
    one = start.sent()
    start.answered(one, 200, 5)
    assert start.window == 2.0  # slow start: one more per answer with room
    two, three = start.sent(), start.sent()
    start.answered(two, 200, 2)
    assert start.window == 3.0
    start.answered(three, 200, 1)
    assert start.window == 3.0  # room for one more only: held
    four, five, six = start.sent(), start.sent(), start.sent()
    start.answered(four, 200, 2)
    assert start.window == 4.0  # min(3 + 1, 2 in flight + 2 room)
    start.answered(five, 200, 2)
    assert start.window == 4.0  # min(4 + 1, 1 in flight + 2 room): never past what was said
    start.answered(six, 429, None)
    assert start.window == 2.0 and not start.slow_start

    gate = AimdGate(AimdConfig(initial=2.0, increase=1.0, decrease=0.5))
    gate.slow_start = False  # congestion avoidance from here
    assert gate.open
    first, second = gate.sent(), gate.sent()
    assert not gate.open  # two in flight: floor(2.0)
    gate.answered(first, 200, 5)
    assert gate.window == 2.5 and gate.increases == 1  # + increase / W
    gate.answered(second, 200, 1)
    assert gate.window == 2.5  # room for one more only: held
    a, b = gate.sent(), gate.sent()
    gate.answered(a, 429, None)
    assert gate.window == 1.25 and gate.decreases == 1
    gate.answered(b, 200, 0)  # sent before the decrease: the same congestion, no second cut
    assert gate.window == 1.25 and gate.decreases == 1
    c = gate.sent()
    gate.answered(c, 503, None)
    assert gate.window == 1.0  # min_window
    d = gate.sent()
    gate.answered(d, None, None)  # a timeout or network error: the window is left alone
    assert gate.window == 1.0 and gate.in_flight == 0
    e = gate.sent()
    gate.answered(e, 200, None)  # a server without credit headers: plain AIMD on 2xx/429
    assert gate.window == 2.0


def test_bounds_and_headers() -> None:
    for bad in ({"initial": 0.5}, {"initial": 8.0, "max_window": 4.0}, {"increase": 0.0}, {"decrease": 1.0}):
        with pytest.raises(ValueError, match="AIMD"):
            AimdConfig(**bad)  # type: ignore[arg-type]
    assert parse_room({"x-rxpipe-queue-room": "4"}) == 4
    assert parse_room({"x-llm-d-flow-band-headroom-requests": "0"}) == 0
    assert parse_room({"x-rxpipe-queue-room": "?"}) is None


def test_aimd_load_fills_a_gateway_without_refusals(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path, "max_num_seqs=4", "queue_capacity=4", "batch_max_size=1", "step_overhead_s=0.01")
    try:
        out = tmp_path / "aimd.json"
        run = load(
            gateway.url, "--aimd", "--duration", "4", "--max-tokens", "8", "--no-scrape", "--quiet", "--json", str(out)
        )
        assert run.returncode == 0, run.stderr
        assert "AIMD window (final, requests):" in run.stdout
        figures: dict[str, Any] = orjson.loads(out.read_bytes())
        aimd = figures["aimd"]
        assert len(aimd["window_per_s"]) == 4 and aimd["increases"] > 0
        # it grew past the engine's 4 slots into the queue and keeps below the 8 places in all
        assert 4.0 <= max(aimd["window_per_s"]) <= 9.0
        outcomes = figures["outcomes"]
        assert outcomes["2xx"] == figures["completed"] == figures["sent"] - outcomes["429"]
        # a 429 answers only the probe past the limit (one per cycle of the window; requests in
        # transit make an answer's room look one or two larger than what is left): about 1 % on an
        # idle machine, 3.1 % seen with the whole suite on both cores
        assert outcomes["429"] <= 0.05 * figures["sent"]
        assert figures["config"]["aimd"]["decrease"] == 0.5
        bad = load(gateway.url, "--aimd", "--rate", "3")
        assert bad.returncode != 0 and "excludes --rate" in bad.stderr
    finally:
        gateway.terminate()
