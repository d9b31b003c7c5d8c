"""``OpenAIEngine``'s state transitions are logged once each (logger ``rxpipe.engine``)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from rxpipe import CircuitBreaker
from rxpipe.engines import CompletionRequest, EngineUnavailableError, OpenAIEngine

from .openai_stub_server import StubServer
from .openai_support import make, wait_for


def transitions(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records
            if r.name == "rxpipe.engine" and r.levelno >= logging.INFO]


async def test_backend_down_and_up_are_logged_once_each(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="rxpipe.engine")
    server = StubServer(tmp_path)
    e = OpenAIEngine(server.url, "stub-model", 4, breaker=CircuitBreaker(2, 0.3), connect_timeout_s=1.0)
    e.name = "backend0"
    where = f"engine backend0 ({server.url}/v1)"
    try:
        assert (await e.submit(CompletionRequest(prompt="up", max_tokens=1)).result).text == " t0"
        server.stop()
        for i in range(2):
            with pytest.raises(EngineUnavailableError):
                await e.submit(CompletionRequest(prompt=f"down{i}")).result
        for _ in range(3):  # refused at once while open: nothing more is logged
            with pytest.raises(EngineUnavailableError):
                e.submit(CompletionRequest(prompt="refused"))
        await wait_for(lambda: e.available, what="half-open")
        with pytest.raises(EngineUnavailableError):  # the trial fails: still down, at DEBUG
            await e.submit(CompletionRequest(prompt="trial")).result
        assert len(transitions(caplog)) == 1
        server.start()
        await wait_for(lambda: e.available, what="half-open again")
        assert (await e.submit(CompletionRequest(prompt="trial", max_tokens=1)).result).text == " t0"
    finally:
        await e.aclose()
        server.stop()
    (down_level, down), (up_level, up) = transitions(caplog)
    assert down_level == "WARNING" and down.startswith(f"{where}: backend down (unreachable: ")
    assert down.endswith("; circuit open, requests get 503, next trial in 0.3 s")
    assert up_level == "INFO"
    assert up.startswith(f"{where}: backend up again after ") and up.endswith(" s; circuit closed")
    assert [r.getMessage() for r in caplog.records if "still down" in r.getMessage()][0].startswith(
        f"{where}: still down (unreachable: ")


async def test_a_503_pause_and_its_end_are_logged_once_each(server: StubServer,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="rxpipe.engine")
    server.control(throttle=3, throttle_status=503, retry_after="0.2")
    e = make(server, max_in_flight=3)
    e.name = "b"
    try:
        completions = [e.submit(CompletionRequest(prompt=f"p{i}", max_tokens=1)) for i in range(3)]
        for c in completions:
            assert (await c.result).text == " t0"
    finally:
        await e.aclose()
    where = f"engine b ({server.url}/v1)"
    logged = transitions(caplog)
    assert logged[0] == ("WARNING", f"{where}: paused by 503 (Retry-After 0.2 s) for 0.2 s: no call goes out meanwhile")
    assert logged[1][0] == "INFO" and logged[1][1].startswith(f"{where}: resumed after a 0.")
    assert len(logged) == 2  # three calls answered 503 together: one pause


async def test_every_call_held_by_429_is_a_pause_logged_once(server: StubServer,
                                                           caplog: pytest.LogCaptureFixture,
                                                           loop: asyncio.AbstractEventLoop) -> None:
    caplog.set_level(logging.INFO, logger="rxpipe.engine")
    server.control(throttle=1, retry_after="0.2")
    e = make(server, max_in_flight=1)
    e.name = "b"
    try:
        assert (await e.submit(CompletionRequest(prompt="x", max_tokens=1)).result).text == " t0"
    finally:
        await e.aclose()
    where = f"engine b ({server.url}/v1)"
    assert transitions(caplog)[0] == (
        "WARNING", f"{where}: paused by 429 (Retry-After 0.2 s) for 0.2 s: every admitted call waits for its "
                   f"Retry-After")
    assert transitions(caplog)[1][1].startswith(f"{where}: resumed after a 0.")
    assert len(transitions(caplog)) == 2
