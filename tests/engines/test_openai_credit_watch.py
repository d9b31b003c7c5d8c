"""OpenAIEngine watching a real rxpipe gateway's credit (DESIGN §8b): once a backend's answer carried
credit the engine keeps ``GET /v1/credit``'s event stream open, so a backend that another client
filled is known full before any request goes, and known free the moment it is; no probe is sent
while the watch is open. A backend that drains ends the watch and the probes take over; one whose
``/v1/credit`` is no event stream is probed only."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import REGISTRY

from rxpipe.engines import CompletionRequest, OpenAIEngine
from rxpipe.engines._openai_credit_watch import room_of
from tests.gateway.server import GatewayProcess, answered, queue_room

from .openai_support import submit, wait_for

#: one engine slot and one place in the queue; a 40-token request runs ~2 s (50 ms steps)
BACKEND = ("max_num_seqs=1", "queue_capacity=1", "batch_max_size=1", "step_overhead_s=0.05")


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("credit-watch-backend"), *BACKEND)
    yield process
    process.terminate()


#: a whole ``/v1/completions`` answer of one token, for the hand-made backends below
ANSWER = {"id": "c", "object": "text_completion", "model": "m",
          "choices": [{"index": 0, "text": "hi", "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def hand_made_backend(completions: Handler, credit: Handler) -> AsyncIterator[str]:
    """A backend of two handlers (``POST /v1/completions``, ``GET /v1/credit``) on a free port,
    for what no rxpipe gateway does (a plain JSON credit, a 502, a gate): its base URL. Handlers
    are cancelled when their client leaves (a stream that would outlive the test)."""
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/credit", credit)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def metric(name: str, engine: OpenAIEngine) -> float | None:
    return REGISTRY.get_sample_value(name, {"engine": engine.name})


def test_room_of_is_queue_room_plus_free_slots_and_none_without_a_queue_room() -> None:
    assert room_of(3, 2) == 5
    assert room_of(3, None) == 3
    assert room_of(0, 4) == 0  # the edge admits nothing, whatever the slots
    assert room_of(-1, 4) == 0
    assert room_of(None, 4) is None
    assert room_of(2, -3) == 2


async def test_a_backend_filled_by_another_client_gets_no_request_while_the_watch_says_full(
    backend: GatewayProcess,
) -> None:
    url = backend.url
    engine = OpenAIEngine(url, "sim", 4, reroute_throttled=True, retry_after_jitter=0.0)
    engine.name = f"credit-watch-{id(engine)}"  # its own series (an engine's metrics are by name)
    async with aiohttp.ClientSession() as other:
        try:
            while await queue_room(other, url) != 1:
                await asyncio.sleep(0.01)  # polling the state: the last test's work has left
            first = submit(engine, CompletionRequest(prompt="hello", max_tokens=2))
            await first.result
            await wait_for(lambda: engine.watching, what="the watch to open")
            assert engine.advertised_room == 2 and engine.credit.probes == 0
            assert metric("rxpipe_engine_credit_watch_up", engine) == 1
            assert metric("rxpipe_engine_advertised_credit", engine) == 2
            before = await answered(other, url)
            fillers = [
                asyncio.create_task(
                    other.post(url + "/v1/completions", json={"model": "sim", "prompt": "f", "max_tokens": 40})
                )
                for _ in range(2)
            ]
            # the watch says it: no request of ours went, none was refused
            await wait_for(lambda: engine.advertised_room == 0, what="the watch to say full")
            assert engine.free_slots == 0 and engine.rerouted == 0
            assert metric("rxpipe_engine_advertised_credit", engine) == 0
            for task in fillers:
                (await task).release()
            # the watch says room as the others leave (no answer of ours, no probe told it)
            await wait_for(lambda: engine.free_slots > 0, timeout_s=10.0, what="the watch to say room")
            assert engine.credit.probes == 0
            resumed = submit(engine, CompletionRequest(prompt="after the others", max_tokens=2))
            assert (await resumed.result).finish_reason in ("length", "stop")
            after = await answered(other, url)
            assert after.get("429", 0) == before.get("429", 0)  # nothing of ours was refused
            assert sum(after.values()) - sum(before.values()) == 3  # the two fillers and ours
            assert engine.credit.probes == 0 and engine.watching
        finally:
            await engine.aclose()
    assert not engine.watching and engine._probe_task is None


async def test_a_draining_backend_ends_the_watch_and_the_probes_take_over(tmp_path: Any) -> None:
    process = GatewayProcess(tmp_path, *BACKEND)
    engine = OpenAIEngine(process.url, "sim", 2, credit_probe_max_s=0.02)
    try:
        await submit(engine, CompletionRequest(prompt="hello", max_tokens=2)).result
        await wait_for(lambda: engine.watching, what="the watch to open")
        process.terminate()  # drains: its last word is no room, then the stream ends
        await wait_for(lambda: not engine.watching, what="the watch to end")
        assert engine.advertised_room == 0 and engine.free_slots == 0
        probes = engine.credit.probes
        await wait_for(lambda: engine.credit.probes >= probes + 2, what="the probes to take over")
        assert engine._watcher is not None and not engine._watcher.unsupported  # tried again later
    finally:
        await engine.aclose()
        process.kill()


async def test_a_backend_whose_credit_is_no_event_stream_is_probed_only() -> None:
    """A backend with the headers and a plain JSON ``/v1/credit`` (an older rxpipe, another server
    speaking the headers): the watch asks once, then the probes are its only path."""
    words = {"room": 1}
    credit_gets: list[str] = []

    def credit_headers() -> dict[str, str]:
        return {"x-rxpipe-queue-room": str(words["room"]), "x-rxpipe-free-slots": "0"}

    async def completions(request: web.Request) -> web.Response:
        await request.read()
        words["room"] = 0  # this answer fills it
        return web.json_response(ANSWER, headers=credit_headers())

    async def credit(request: web.Request) -> web.Response:
        credit_gets.append(request.headers.get("Accept", ""))
        return web.json_response({"queue_room": words["room"]}, headers=credit_headers())

    async with hand_made_backend(completions, credit) as url:
        engine = OpenAIEngine(url, "m", 2, chat=False, credit_probe_max_s=0.02)
        try:
            await submit(engine, CompletionRequest(prompt="hello", max_tokens=2)).result
            assert engine.advertised_room == 0
            await wait_for(lambda: engine._watcher is not None and engine._watcher.unsupported,
                           what="the watch to find no event stream")
            assert credit_gets.count("text/event-stream") == 1 and not engine.watching
            probes = engine.credit.probes
            await wait_for(lambda: engine.credit.probes >= probes + 2, what="probes")
            words["room"] = 1
            await wait_for(lambda: engine.advertised_room == 1, what="a probe to say room")
            assert credit_gets.count("text/event-stream") == 1  # asked once only
        finally:
            await engine.aclose()


async def test_the_backend_counts_every_call_the_engine_sends_once_the_watch_is_open(backend: GatewayProcess) -> None:
    """The watch's ``seen``: the calls sent after the watch opened are the calls the backend
    decided, one for one (the count's base is the one call that taught the engine the backend's
    credit, sent before the watch; a miscount would move the base when the engine is idle)."""
    engine = OpenAIEngine(backend.url, "sim", 4)
    try:
        await submit(engine, CompletionRequest(prompt="hello", max_tokens=2)).result
        await wait_for(lambda: engine.watching, what="the watch to open")
        for n in range(5):
            streamed = CompletionRequest(prompt=f"call {n}", max_tokens=2, stream=n % 2 == 0)
            assert (await submit(engine, streamed).result).finish_reason in ("length", "stop")
        assert engine._sent == 6
        await wait_for(lambda: engine._seen_base == 1 and engine.credit.seq >= 0, what="the count to settle")
        assert engine._unsent(5) == 0 and engine._seen_base == 1  # "seen 5": none of ours on its way
    finally:
        await engine.aclose()


async def test_a_watch_refused_by_a_passing_fault_is_opened_again() -> None:
    """A backend behind a reverse proxy that answered the watch 502 while the backend restarted
    (or any 5xx): a passing fault, not a backend without a watch; the watcher asks again on its
    backoff and the watch opens."""
    watches: list[int] = []

    def credit_headers() -> dict[str, str]:
        return {"x-rxpipe-queue-room": "1", "x-rxpipe-free-slots": "1"}

    async def completions(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(ANSWER, headers=credit_headers())

    async def credit(request: web.Request) -> web.StreamResponse:
        watches.append(len(watches))
        if len(watches) == 1:
            return web.Response(status=502, text="<html>502 Bad Gateway</html>", content_type="text/html")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **credit_headers()})
        await response.prepare(request)
        await response.write(b'data: {"free_slots": 1, "queue_room": 1, "seq": 1}\n\n')
        await asyncio.sleep(60)  # the test ends first
        return response

    async with hand_made_backend(completions, credit) as url:
        engine = OpenAIEngine(url, "m", 2, chat=False, credit_probe_max_s=0.02)
        try:
            await submit(engine, CompletionRequest(prompt="hello", max_tokens=2)).result
            await wait_for(lambda: engine.watching, what="the watch to open after the 502")
            assert engine._watcher is not None and not engine._watcher.unsupported
            assert len(watches) == 2
        finally:
            await engine.aclose()


@pytest.mark.parametrize("credit_watch", [True, False])
async def test_the_watch_and_the_probes_carry_the_engines_own_headers(credit_watch: bool) -> None:
    """A backend behind a gate that wants a header of the engine's ``headers=`` on every request
    (a proxy's key, a tenant): the watch and the probes carry it too, so a backend that said 0
    is heard saying room again (without it they got 403 forever and the backend no request)."""
    seen: list[tuple[str | None, str]] = []
    gate = {"X-Backend-Key": "k"}

    async def completions(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(ANSWER, headers={"x-rxpipe-queue-room": "0", "x-rxpipe-free-slots": "0"})

    async def credit(request: web.Request) -> web.StreamResponse:
        seen.append((request.headers.get("X-Backend-Key"), request.headers.get("Accept", "")))
        if request.headers.get("X-Backend-Key") != "k":
            return web.Response(status=403, text="forbidden")
        headers = {"x-rxpipe-queue-room": "1", "x-rxpipe-free-slots": "0"}
        if request.headers.get("Accept") != "text/event-stream":
            return web.json_response({"queue_room": 1, "free_slots": 0}, headers=headers)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
        await response.prepare(request)
        await response.write(b'data: {"free_slots": 0, "queue_room": 1}\n\n')
        await asyncio.sleep(60)  # the test ends first
        return response

    async with hand_made_backend(completions, credit) as url:
        engine = OpenAIEngine(url, "m", 2, chat=False, headers=gate,
                              credit_probe_max_s=0.02, credit_watch=credit_watch)
        try:
            await submit(engine, CompletionRequest(prompt="hello", max_tokens=2)).result
            await wait_for(lambda: engine.advertised_room == 1, what="the backend's word of room")
            assert seen and all(key == "k" for key, _ in seen)
            assert ("text/event-stream" in (accept for _, accept in seen)) is credit_watch
        finally:
            await engine.aclose()


async def test_a_backend_whose_watch_went_silent_is_not_believed_until_it_speaks_again(tmp_path: Any) -> None:
    """A backend stopped by SIGSTOP: its watch says nothing for 3 s and ends; its last word (room
    2) no longer counts, so no request goes into a backend that answers nothing (they would wait
    there for total_timeout_s); the probes say room again once it resumes."""
    process = GatewayProcess(tmp_path, *BACKEND)
    engine = OpenAIEngine(process.url, "sim", 2, credit_probe_max_s=0.02)
    try:
        await submit(engine, CompletionRequest(prompt="hello", max_tokens=2)).result
        await wait_for(lambda: engine.watching, what="the watch to open")
        await wait_for(lambda: engine.advertised_room == 2, what="the idle backend's word")
        process.proc.send_signal(signal.SIGSTOP)
        await wait_for(lambda: not engine.watching, timeout_s=10.0, what="the silent watch to end")
        assert engine.advertised_room == 0 and engine.free_slots == 0
        process.proc.send_signal(signal.SIGCONT)
        await wait_for(lambda: engine.advertised_room == 2, timeout_s=10.0, what="the resumed backend's word")
    finally:
        process.proc.send_signal(signal.SIGCONT)
        await engine.aclose()
        process.kill()


async def test_a_credit_event_over_4096_bytes_ends_the_watch_and_it_is_opened_again() -> None:
    """The watcher holds at most 4096 bytes of an event not yet whole: a stream that sends more
    without ending the event is cut (logged), nothing of it is taken for a word, and the watch is
    opened again on the backoff."""
    opened: list[int] = []

    async def completions(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(ANSWER, headers={"x-rxpipe-queue-room": "1", "x-rxpipe-free-slots": "0"})

    async def credit(request: web.Request) -> web.StreamResponse:
        opened.append(len(opened))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b'data: {"queue_room": 5, "free_slots": 0, "pad": "' + b"x" * 4097)
        await asyncio.sleep(60)  # the test ends first
        return response

    async with hand_made_backend(completions, credit) as url:
        engine = OpenAIEngine(url, "m", 2, chat=False, credit_probe_max_s=0.02)
        try:
            await submit(engine, CompletionRequest(prompt="hello", max_tokens=2)).result
            await wait_for(lambda: len(opened) >= 2, what="the watch to be opened again")
            watcher = engine._watcher
            assert watcher is not None and watcher.events == 0 and not watcher.unsupported
            assert engine.advertised_room != 5  # the cut event was never a word
        finally:
            await engine.aclose()
