"""OpenAIEngine in front of a real rxpipe gateway: the backend's advertised credit is the engine's
demand (DESIGN §8b). A backend that says 0 room gets no real request until a ``GET /v1/credit``
probe says more; a backend without the headers keeps today's signals."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import aiohttp
import pytest

from rxpipe.engines import CompletionRequest, OpenAIEngine
from rxpipe.engines._openai_credit import BackendCredit, parse_room
from rxpipe.errors import EngineUnavailableError
from rxpipe.settings import SettingError
from rxpipe.testing import run_virtual
from tests.gateway.server import GatewayProcess, answered, queue_room

from .openai_stub_server import StubServer
from .openai_support import make, submit, wait_for

#: a word older than this allows one call at a time (credit_fresh_s), in the unit test
FRESH_S = 0.005
#: one engine slot and one place in the queue; a 40-token request runs ~2 s (50 ms steps)
BACKEND = ("max_num_seqs=1", "queue_capacity=1", "batch_max_size=1", "step_overhead_s=0.05")


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("credit-backend"), *BACKEND)
    yield process
    process.terminate()


async def completions_answered(session: aiohttp.ClientSession, url: str) -> int:
    """``/v1/completions`` requests the backend answered (every status), from its metrics."""
    return sum((await answered(session, url)).values())


def test_parse_room_reads_rxpipe_then_llm_d_and_ignores_garbage() -> None:
    assert parse_room({"x-rxpipe-queue-room": "3"}) == 3
    assert parse_room({"x-rxpipe-queue-room": "3", "x-rxpipe-free-slots": "2"}) == 5  # a burst of 5 is taken
    assert parse_room({"x-llm-d-flow-band-headroom-requests": "2"}) == 2
    assert parse_room({"x-rxpipe-queue-room": "x", "x-llm-d-flow-band-headroom-requests": "5"}) == 5
    assert parse_room({"x-rxpipe-queue-room": "-4", "x-rxpipe-free-slots": "0"}) == 0
    assert parse_room({"x-rxpipe-queue-room": "0", "x-rxpipe-free-slots": "1"}) == 0  # admits nothing
    assert parse_room({}) is None
    credit = BackendCredit(FRESH_S)
    assert credit.left(0.0) is None and not credit.spend(0.0)
    assert credit.observe(3, 0, 10.0) and credit.left(10.0) == 3
    assert not credit.spend(10.001) and credit.left(10.001) == 2
    assert credit.left(10.0 + FRESH_S + 0.001) == 0  # an old word allows one call at a time: one went
    assert credit.observe(3, 0, 11.0) and credit.left(11.0 + FRESH_S + 0.001) == 1
    assert not credit.spend(11.001) and not credit.spend(11.002) and credit.spend(11.003) and credit.left(11.003) == 0
    assert credit.observe(1, 0, 12.0) and not credit.observe(1, 0, 12.0)
    plain = BackendCredit()  # the default: a word holds until the next, however old
    assert plain.observe(3, 0, 0.0) and not plain.spend(0.0) and plain.left(100.0) == 2
    assert not plain.observe(5, 0, 100.0, seq=7) or plain.left(100.0) == 5
    assert not plain.observe(0, 0, 100.1, seq=6) and plain.left(100.1) == 5 and plain.stale == 1  # older word


def test_probe_bounds_are_checked() -> None:
    with pytest.raises(SettingError, match="credit_probe_min_s"):
        OpenAIEngine("http://127.0.0.1:1", "m", 1, credit_probe_min_s=0)
    with pytest.raises(SettingError, match="credit_probe_max_s"):
        OpenAIEngine("http://127.0.0.1:1", "m", 1, credit_probe_min_s=0.1, credit_probe_max_s=0.01)


async def test_zero_room_sends_nothing_until_the_probe_says_more(backend: GatewayProcess) -> None:
    url = backend.url
    # answers and probes only (the watch, which would say "full" before any request, is
    # tests/engines/test_openai_credit_watch.py's)
    engine = OpenAIEngine(url, "sim", 4, reroute_throttled=True, retry_after_jitter=0.0, credit_watch=False)
    async with aiohttp.ClientSession() as other:
        try:
            first = submit(engine, CompletionRequest(prompt="hello", max_tokens=2))
            await first.result
            # the answer went out with the backend idle: its slot and its place free
            assert engine.advertised_room == 2 and engine.free_slots == 2
            # another client fills the backend: one running, one queued
            fillers = [
                asyncio.create_task(
                    other.post(url + "/v1/completions", json={"model": "sim", "prompt": "f", "max_tokens": 40})
                )
                for _ in range(2)
            ]
            while await queue_room(other, url) != 0:
                await asyncio.sleep(0.01)  # polling the backend's state
            sent = await completions_answered(other, url)
            # still believed 2: one real request goes, is refused 429 and failed at once to be routed
            # elsewhere, and the 429's headers say 0
            refused = submit(engine, CompletionRequest(prompt="into the full one", max_tokens=2))
            with pytest.raises(EngineUnavailableError, match="routed elsewhere"):
                await refused.result
            assert engine.rerouted == 1 and engine.advertised_room == 0 and engine.free_slots == 0
            probes = engine.credit.probes
            await wait_for(lambda: engine.credit.probes >= probes + 3, what="three more probes")
            # probes only: no real request while the backend says no room
            assert await completions_answered(other, url) == sent + 1
            for task in fillers:
                (await task).release()
            await wait_for(lambda: engine.free_slots > 0, timeout_s=10.0, what="the probe to say room")
            resumed = submit(engine, CompletionRequest(prompt="again", max_tokens=2))
            assert (await resumed.result).finish_reason in ("length", "stop")
            assert engine.advertised_room == 2  # its answer went out with the backend idle again
        finally:
            await engine.aclose()
    assert engine._probe_task is None


async def test_a_backend_without_credit_headers_keeps_todays_signals(server: StubServer) -> None:
    engine = make(server, 3)
    try:
        completion = submit(engine, CompletionRequest(prompt="hi", max_tokens=2))
        await completion.result
        assert engine.advertised_room is None and engine.credit.probes == 0
        assert engine.free_slots == 3
    finally:
        await engine.aclose()


class ScriptedProbes(OpenAIEngine):
    """An engine whose ``GET /v1/credit`` is replaced by a script of answers (the probe's
    schedule is the unit under test, the HTTP call its boundary): each item is the room the
    backend says, or None for a probe that fails (connection refused)."""

    def __init__(self, rooms: list[int | None]) -> None:
        super().__init__("http://127.0.0.1:1", "m", 2, credit_watch=False)
        self.rooms = rooms
        self.sent_at: list[float] = []

    async def _probe_once(self) -> dict[str, str] | None:
        self.credit.probes += 1
        self.sent_at.append(self._now())
        room = self.rooms.pop(0)
        return None if room is None else {"x-rxpipe-queue-room": str(room), "x-rxpipe-free-slots": "0"}


def test_the_probe_backs_off_from_2_ms_doubling_to_50_ms_and_stops_when_the_backend_says_room() -> None:
    async def main() -> tuple[list[float], int | None, int]:
        loop = asyncio.get_running_loop()
        engine = ScriptedProbes([0, 0, None, 0, 0, 0, 0, 0, 3])
        engine.bind_loop(loop)
        engine._loop = loop  # as submit() binds it
        start = loop.time()
        assert engine._observe_credit({"x-rxpipe-queue-room": "0", "x-rxpipe-free-slots": "1"})
        assert engine.advertised_room == 0 and engine._probe_task is not None
        while engine._probe_task is not None:
            await asyncio.sleep(0.001)
        try:
            return [round(t - start, 6) for t in engine.sent_at], engine.advertised_room, engine.credit.probes
        finally:
            await engine.aclose()

    sent_at, room_after, probes = run_virtual(main())
    # 2, 4, 8, 16, 32 ms, then 50 ms each (credit_probe_max_s); a failed probe keeps the backoff
    assert sent_at == [0.002, 0.006, 0.014, 0.03, 0.062, 0.112, 0.162, 0.212, 0.262]
    assert room_after == 3 and probes == 9
