"""The credit watch (DESIGN §8b): ``GET /v1/credit`` with ``Accept: text/event-stream`` on a real
``rxpipe run`` gateway pushes the edge's credit as it changes, repeats it on a heartbeat, is
bounded in watchers, and ends with a last word of no room when the gateway drains."""

from __future__ import annotations

import asyncio
import itertools
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from rxpipe.engines._openai_credit_watch import WATCH_SILENCE_S
from rxpipe.gateway._credit import Credit
from rxpipe.gateway._credit_watch import CreditWatch
from tests.gateway.server import GATEWAY, GatewayProcess

#: two engine slots, two places in the queue; a 40-token request runs ~2 s (50 ms steps); one
#: watcher at most, a heartbeat every 0.3 s
SETTINGS = ("max_num_seqs=2", "queue_capacity=2", "batch_max_size=1", "step_overhead_s=0.05",
            "credit_watchers_max=1", "credit_heartbeat_s=0.3")
WATCH = {"Accept": "text/event-stream"}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    process = GatewayProcess(tmp_path_factory.mktemp("credit-watch"), *SETTINGS)
    yield process
    process.terminate()


async def events(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The credit words of a watch, in order."""
    async for line in response.content:
        if line.startswith(b"data: "):
            yield orjson.loads(line[6:])


def room(word: dict[str, Any]) -> tuple[int, int]:
    return word["free_slots"], word["queue_room"]


async def idle(session: aiohttp.ClientSession, url: str) -> None:
    while True:  # polling the state: the last test's work has left
        async with session.get(url + "/v1/credit") as response:
            if room(await response.json()) == (2, 2):
                return
        await asyncio.sleep(0.01)


async def test_the_watch_pushes_every_change_of_room_and_nothing_else(gateway: GatewayProcess) -> None:
    async with aiohttp.ClientSession() as session:
        await idle(session, gateway.url)
        async with session.get(gateway.url + "/v1/credit", headers=WATCH) as watch:
            assert watch.status == 200 and watch.content_type == "text/event-stream"
            assert (watch.headers["x-rxpipe-free-slots"], watch.headers["x-rxpipe-queue-room"]) == ("2", "2")
            words = events(watch)
            first = await anext(words)
            assert first["seq"] == int(watch.headers["x-rxpipe-credit-seq"])  # the head's snapshot
            # the plain probe's body: (the drain rate is what the last test left measured)
            assert set(first) == {"free_slots", "queue_room", "drain_per_s", "queue_duration_ms", "seq"}
            assert (room(first), first["queue_duration_ms"]) == ((2, 2), 0)
            body = {"model": "sim", "prompt": "hold a slot", "max_tokens": 40}
            fillers = [asyncio.create_task(session.post(gateway.url + "/v1/completions", json=body))
                       for _ in range(4)]
            seen = [first]
            answered_when_full = None
            async with asyncio.timeout(10):
                async for word in words:  # two running, two queued: no room, then all of it again
                    seen.append(word)
                    if room(word) == (0, 0) and answered_when_full is None:
                        answered_when_full = sum(filler.done() for filler in fillers)
                    if room(word) == (2, 2) and answered_when_full is not None:
                        break
            for filler in fillers:
                assert (await filler).status == 200
        # "full" was pushed while the four ran (~2 s each), not learnt from an answer
        assert answered_when_full == 0
        seqs = [word["seq"] for word in seen]
        assert seqs == sorted(set(seqs))  # each word a newer snapshot


async def test_the_heartbeat_repeats_the_snapshot_of_an_idle_edge(gateway: GatewayProcess) -> None:
    async with aiohttp.ClientSession() as session:
        await idle(session, gateway.url)
        async with session.get(gateway.url + "/v1/credit", headers=WATCH) as watch:
            words = events(watch)
            async with asyncio.timeout(5):
                seen = [await anext(words) for _ in range(3)]
    assert [room(word) for word in seen] == [(2, 2)] * 3
    assert seen[0]["seq"] < seen[1]["seq"] < seen[2]["seq"]


async def test_one_watcher_over_the_bound_gets_429(gateway: GatewayProcess) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.get(gateway.url + "/v1/credit", headers=WATCH) as watch:
            await anext(events(watch))  # open
            async with session.get(gateway.url + "/v1/credit", headers=WATCH) as second:
                assert second.status == 429
                assert second.headers["Retry-After"] == "1"
                assert (await second.json())["error"] == {
                    "message": "at most 1 credit watches at once", "type": "overloaded_error", "param": None,
                    "code": "too_many_watchers"}
            # the plain probe is no watch: always answered
            async with session.get(gateway.url + "/v1/credit") as probe:
                assert probe.status == 200 and probe.content_type == "application/json"
        async with asyncio.timeout(5):
            while True:  # the first watch closed: its place is free again
                async with session.get(gateway.url + "/v1/credit", headers=WATCH) as again:
                    if again.status == 200:
                        break
                await asyncio.sleep(0.01)


async def test_a_draining_gateway_says_no_room_and_ends_the_watch(tmp_path: Any) -> None:
    process = GatewayProcess(tmp_path, *SETTINGS)
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(process.url + "/v1/credit", headers=WATCH) as watch:
                words = events(watch)
                assert room(await anext(words)) == (2, 2)
                process.proc.send_signal(signal.SIGTERM)
                async with asyncio.timeout(10):
                    rest = [word async for word in words if room(word) != (2, 2)]  # to the stream's end
        assert [room(word) for word in rest] == [(0, 0)]
        assert process.wait() == 0
    finally:
        process.kill()


async def test_a_watch_naming_its_router_counts_that_routers_calls_as_the_edge_decides_them(
    gateway: GatewayProcess,
) -> None:
    mine = {"x-rxpipe-router-id": "router-a"}
    async with aiohttp.ClientSession() as session:
        await idle(session, gateway.url)
        body = {"model": "sim", "prompt": "hi", "max_tokens": 2}
        # before its watch the router is no one: its calls are not counted, no x-rxpipe-seen
        async with session.post(gateway.url + "/v1/completions", json=body, headers=mine) as before:
            assert before.status == 200 and "x-rxpipe-seen" not in before.headers
        async with session.get(gateway.url + "/v1/credit", headers={**WATCH, **mine}) as watch:
            words = events(watch)
            assert (await anext(words))["seen"] == 0
            async with session.post(gateway.url + "/v1/completions", json=body, headers=mine) as admitted:
                assert admitted.status == 200
                assert admitted.headers["x-rxpipe-seen"] == "1"  # its own call, counted at admission
            async with session.post(gateway.url + "/v1/completions", json={"model": "sim"}, headers=mine) as bad:
                assert bad.status == 400 and bad.headers["x-rxpipe-seen"] == "2"  # decided: refused
            async with session.post(gateway.url + "/v1/completions", json=body) as other:
                assert other.status == 200 and "x-rxpipe-seen" not in other.headers  # not the router's
            async with asyncio.timeout(5):
                while (await anext(words)).get("seen") != 2:
                    pass  # the count reaches the watch as it moves (its words in order)
            async with session.get(gateway.url + "/v1/credit", headers={**WATCH, "x-rxpipe-router-id": "bad id!"}) \
                    as invalid:
                assert invalid.status == 429  # the bound (one watcher) holds whatever the id
        # the watch closed: the router is no one again
        await asyncio.sleep(0)
        async with asyncio.timeout(5):
            while True:
                async with session.post(gateway.url + "/v1/completions", json=body, headers=mine) as after:
                    if "x-rxpipe-seen" not in after.headers:
                        break
                await asyncio.sleep(0.01)  # the server notices the closed stream on its next write


def _watch_that_never_reads(port: int) -> socket.socket:
    """A watch whose client reads nothing (a router stopped by SIGSTOP, a peer gone silent): the
    smallest receive window, so the gateway's socket buffer fills at once."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /v1/credit HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
    return sock


def _unsent_bytes(server_port: int, client_port: int) -> int | None:
    """The kernel's send queue of the gateway's end of one loopback connection (/proc/net/tcp)."""
    local, remote = f"0100007F:{server_port:04X}", f":{client_port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == local and fields[2].endswith(remote):
            return int(fields[4].split(":")[0], 16)
    return None


async def test_a_watcher_that_never_reads_does_not_hold_up_the_gateways_stop(tmp_path: Any) -> None:
    """Its write buffer full, the watcher cannot take the last word: the drain cuts its
    connection rather than leaving the stop to wait shutdown_timeout_s (twice) for it."""
    process = GatewayProcess(tmp_path, "credit_heartbeat_s=0.0001")  # ~10,000 words a second
    stuck = _watch_that_never_reads(process.port)
    try:
        client_port = stuck.getsockname()[1]
        last = None
        async with asyncio.timeout(20):
            while True:  # polling the state: the kernel's buffer toward it is full once it stops growing
                await asyncio.sleep(0.3)
                unsent = _unsent_bytes(process.port, client_port)
                if unsent and unsent == last:
                    break
                last = unsent
        process.proc.send_signal(signal.SIGTERM)
        assert process.wait() == 0
        assert "still owed an answer" not in process.output
    finally:
        stuck.close()
        process.kill()


async def test_a_watch_opened_in_the_pass_of_a_change_hides_that_change_from_no_other_watcher() -> None:
    """An admission and a new watch in one loop pass (two handler tasks ready together): the
    snapshot the admission scheduled still reaches the watchers already open. The heartbeat is a
    minute, so only the change itself can tell them."""
    state = {"room": 2}
    seq = itertools.count(1)

    def snapshot() -> Credit:
        return Credit(state["room"], state["room"], 0.0, 0, next(seq))

    watch = CreditWatch(snapshot, 4, 60.0)

    async def credit(request: web.Request) -> web.StreamResponse:
        if "fill" in request.query:
            state["room"] = 0
            watch.changed()  # an admission spent the room: a snapshot goes at the end of this pass
        return await watch.serve(request, snapshot(), lambda response: None)

    app = web.Application()
    app.router.add_get("/v1/credit", credit)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "/v1/credit", headers=WATCH) as first:
                words = events(first)
                assert room(await anext(words)) == (2, 2)
                async with session.get(url + "/v1/credit?fill", headers=WATCH) as second:
                    assert room(await anext(events(second))) == (0, 0)
                    async with asyncio.timeout(5):
                        assert room(await anext(words)) == (0, 0)
    finally:
        watch.close()
        await runner.cleanup()


@pytest.mark.parametrize(("accept", "content_type"), [
    ("text/event-stream", "text/event-stream"),
    ("TEXT/Event-Stream", "text/event-stream"),  # media types are case-insensitive (RFC 9110 §8.3.1)
    ("application/json;q=0.5, text/event-stream; charset=utf-8", "text/event-stream"),
    ("text/event-stream;q=0, application/json", "application/json"),  # q=0: "not acceptable" (§12.4.2)
    ("text/event-stream ; Q=0.0", "application/json"),
    ("*/*", "application/json"),
    ("application/json", "application/json"),
])
async def test_the_watch_is_what_the_accept_header_asks_for(gateway: GatewayProcess, accept: str,
                                                            content_type: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with asyncio.timeout(5):
            while True:  # the bound is one watch: the last test's may still be closing
                async with session.get(gateway.url + "/v1/credit", headers={"Accept": accept}) as answer:
                    if answer.status != 429:
                        assert (answer.status, answer.content_type) == (200, content_type)
                        break
                await asyncio.sleep(0.01)


async def test_a_watcher_that_never_reads_gives_its_place_back(tmp_path: Any) -> None:
    """One place (credit_watchers_max=1), taken by a client that reads nothing: once its socket
    buffer stays full from one heartbeat to the next it is cut, and a router's watch opens."""
    process = GatewayProcess(tmp_path, "credit_watchers_max=1", "credit_heartbeat_s=0.0001")
    stuck = _watch_that_never_reads(process.port)
    refused = 0
    try:
        async with aiohttp.ClientSession() as session:
            async with asyncio.timeout(20):
                while True:  # polling the state: 429 while the place is held
                    async with session.get(process.url + "/v1/credit", headers=WATCH) as watch:
                        if watch.status == 200:
                            assert room(await anext(events(watch))) == (256, 100)
                            break
                        assert watch.status == 429
                        refused += 1
                    await asyncio.sleep(0.05)
        assert refused > 0  # it did hold the place first
        assert process.terminate() == 0
    finally:
        stuck.close()
        process.kill()


def test_a_heartbeat_a_router_would_take_for_silence_is_refused_at_start() -> None:
    """A router deems a watch that said nothing for 3 s dead (WATCH_SILENCE_S): a heartbeat of
    3 s or more would have every router's watch broken and opened again every 3 s on an idle
    gateway. The setting stops the start instead, naming itself."""
    assert WATCH_SILENCE_S == 3.0
    run = subprocess.run([sys.executable, "-m", "rxpipe", "run", str(GATEWAY), "--port", "0",
                          "--set", "credit_heartbeat_s=3"], capture_output=True, text=True, timeout=30)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "rxpipe: error: setting credit_heartbeat_s must be a number > 0 and <= 2, got 3 (int)")
