"""The contract across hosts, for each broker, in real processes: ``rxpipe run
pipelines/llm_gateway.py --set broker_url=…`` and ``pipelines/llm_worker.py``, a real broker,
real HTTP clients that leave, stall, or come from a host whose clock is off."""

from __future__ import annotations

import asyncio
import random
import time

import aiohttp
import pytest

from .conftest import Broker, Processes
from .helpers import (
    abandon,
    gateway,
    histogram_quantile,
    rss_bytes,
    sample,
    scrape,
    skewed_env,
    stalled_reader,
    worker,
    worker_metrics,
)

pytestmark = pytest.mark.loops("asyncio")


async def eventually(check, timeout_s: float = 15.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout_s} s"
        await asyncio.sleep(0.1)


@pytest.mark.timeout(120)
async def test_1000_clients_leave_streamed_and_unary_queued_and_decoding_no_orphan_and_fast_aborts(
        broker: Broker, processes: Processes) -> None:
    total, concurrency = 1000, 40
    gw = gateway(processes, broker)
    wk = worker(processes, broker, "max_num_seqs=24", "step_overhead_s=0.01", "consumer=w1")
    rng = random.Random(7)
    gate = asyncio.Semaphore(concurrency)
    decoding = 0

    async def client(i: int) -> None:
        nonlocal decoding
        async with gate:
            body = {"model": "sim", "prompt": f"client {i}", "max_tokens": 4000, "stream": i % 2 == 0}
            started = await abandon(int(gw.url.rsplit(":", 1)[1]), body, rng.uniform(0.02, 0.3))  # type: ignore[union-attr]
            decoding += started

    await asyncio.gather(*(client(i) for i in range(total)))

    def settled() -> bool:
        m = worker_metrics(wk)
        return (sample(m, "rxpipe_engine_running_seqs", engine="sim") == 0
                and sample(m, "rxpipe_engine_waiting_seqs", engine="sim") == 0
                and sample(scrape(f"{gw.url}/metrics"), "rxpipe_stage_buffered_items", stage="broker") == 0)

    await eventually(settled, 30, "no sequence left on the worker, nothing left on the queue")
    await asyncio.sleep(0.5)
    edge, m = scrape(f"{gw.url}/metrics"), worker_metrics(wk)
    outcomes = {o: sample(edge, "rxpipe_requests_finished_total", outcome=o) for o in ("ok", "error", "cancelled")}
    assert outcomes == {"ok": 0, "error": 0, "cancelled": total}, outcomes
    kind = broker.url.split(":", 1)[0]
    read = sample(m, "rxpipe_stage_items_total", stage=f"{kind}_source", direction="in")
    cancelled = sample(m, "rxpipe_requests_finished_total", outcome="cancelled")
    assert sample(m, "rxpipe_requests_finished_total", outcome="ok") == 0
    assert cancelled == read > 0, (cancelled, read)  # every request the worker read was cancelled there
    where = {w: sample(m, "rxpipe_transport_cancels_total", where=w) for w in ("unread", "queued", "running")}
    assert sum(where.values()) == cancelled and where["running"] > 0, where
    # cancelled while still in the broker's queue: withdrawn by the gateway before any read (the
    # rest of the 1,000; how many a worker read first and skipped, "unread", is a race: Redis's
    # XDEL nearly always wins it, NATS's delete by sequence less often). Kafka deletes no record:
    # the worker reads every one, and skips those whose cancel it read first
    if kind == "kafka":
        assert read == total and where["unread"] == total - where["queued"] - where["running"], (read, where)
    else:
        assert read < total, read
    assert sample(m, "rxpipe_transport_cancel_seconds_count") == where["queued"] + where["running"]
    p50 = histogram_quantile(m, "rxpipe_transport_cancel_seconds", 0.5)
    p99 = histogram_quantile(m, "rxpipe_transport_cancel_seconds", 0.99)
    print(f"\n{kind}: {total} disconnects ({decoding} streamed while decoding), {read:.0f} "
          f"reached the worker {where}; disconnect -> abort p50 <= {p50 * 1000:g} ms, p99 <= {p99 * 1000:g} ms")
    # aborted, not run on: each would decode for 40 s. The 50 ms target is measured by
    # bench/transport.py on a quiet machine (speed is never a timed test on a shared one)
    assert p99 <= 1.0


@pytest.mark.timeout(120)
async def test_20_stalled_readers_bounded_gateway_memory_worker_stops_stepping_stall_timeout_ends_them(
        broker: Broker, processes: Processes) -> None:
    gw = gateway(processes, broker, "credit_window=8")
    wk = worker(processes, broker, "max_num_seqs=32", "step_overhead_s=0.005", "stall_timeout_s=4")
    port = int(gw.url.rsplit(":", 1)[1])  # type: ignore[union-attr]
    async def warm(http: aiohttp.ClientSession, i: int) -> None:
        body = {"prompt": f"warm {i}", "max_tokens": 600, "stream": True}
        async with http.post(f"{gw.url}/v1/completions", json=body) as r:
            assert r.status == 200
            await r.read()

    async with aiohttp.ClientSession() as http:  # 20 streams read to the end: the process's working set
        await asyncio.gather(*(warm(http, i) for i in range(20)))
    await asyncio.sleep(0.5)
    warmed = tokens_now = sample(worker_metrics(wk), "rxpipe_engine_batch_tokens_sum", engine="sim")
    before = rss_bytes(gw.proc.pid)
    readers = [stalled_reader(port, {"model": "sim", "prompt": f"reader {i}", "max_tokens": 8000, "stream": True})
               for i in range(20)]
    try:
        def tokens() -> float:
            return sample(worker_metrics(wk), "rxpipe_engine_batch_tokens_sum", engine="sim")

        # the sockets' buffers fill (a few hundred events), then every sequence is parked: the
        # worker steps at most one credit window more per stream (what the kernel still takes in)
        window = 20 * 8
        first, deadline = tokens(), time.monotonic() + 20
        while True:
            await asyncio.sleep(0.5)
            now = tokens()
            if now - first <= window and now > warmed + 20 * 10:
                break
            assert time.monotonic() < deadline, "the worker kept stepping the stalled streams"
            first = now
        await asyncio.sleep(1.0)
        assert tokens() - first <= window
        grown = rss_bytes(gw.proc.pid) - before
        per_stream = (first - tokens_now) / 20
        print(f"\n{broker.url.split(':')[0]}: gateway RSS +{grown / 1e6:.2f} MB with 20 stalled readers; "
              f"{per_stream:.0f} tokens stepped per stream before the stall (max_tokens 8,000)")
        assert grown < 10_000_000
        assert per_stream < 2000
        assert sample(worker_metrics(wk), "rxpipe_engine_running_seqs", engine="sim") == 20

        def ended() -> bool:
            m = worker_metrics(wk)
            return (sample(m, "rxpipe_requests_finished_total", outcome="stalled") == 20
                    and sample(m, "rxpipe_engine_running_seqs", engine="sim") == 0)

        await eventually(ended, 15, "the stall timeout ending the 20 streams on the worker")
        for sock in readers:  # and at the gateway: each connection is closed
            sock.settimeout(10)
            while sock.recv(65536):
                pass
        edge = scrape(f"{gw.url}/metrics")
        assert sample(edge, "rxpipe_requests_finished_total", outcome="stalled") == 20
    finally:
        for sock in readers:
            sock.close()


@pytest.mark.timeout(120)
async def test_a_gateway_whose_clock_is_an_hour_off_shares_the_room_and_keeps_deadlines(
        broker: Broker, processes: Processes, tmp_path) -> None:  # type: ignore[no-untyped-def]
    common = ("max_backlog=20", "refresh_interval_s=0.05", "latency_budget_s=30")
    gateways = [gateway(processes, broker, *common),
                gateway(processes, broker, *common, env=skewed_env(tmp_path, -3600.0))]
    # each gateway registered and saw the other (on the broker's clock): a Kafka gateway hears
    # its peers' next beat after it starts, up to a second later, longer on a loaded machine
    await eventually(lambda: all("2 live gateways on the queue" in gw.output for gw in gateways), 30,
                     "each gateway counting the other")

    async def post(http: aiohttp.ClientSession, url: str, i: int) -> int:
        async with http.post(f"{url}/v1/completions", json={"prompt": f"p{i}", "max_tokens": 3}) as r:
            await r.read()
            return r.status

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        # The burst reaches both gateways at once, as far as the broker can tell: frozen, it stores
        # no admission and answers no refresh until every client was answered or refused, so each
        # gateway admits the share of the room it last saw, ceil(20 / 2). Unfrozen, the shares
        # depend on the timing: a gateway whose clients come after a refresh that saw the other's
        # admissions gets half of what is left (a burst 0.3 s late at one gateway: 10 and 5).
        with broker.frozen():
            tasks = {gw.url: [asyncio.ensure_future(post(http, gw.url, i)) for i in range(30)]  # type: ignore[arg-type]
                     for gw in gateways}
            await eventually(lambda: sum(t.done() for ts in tasks.values() for t in ts) == 40, 20, "40 refusals")
            for url, ts in tasks.items():  # each admitted its share of the room: ceil(20 / 2)
                assert sum(t.done() for t in ts) == 20, url
                assert {t.result() for t in ts if t.done()} == {429}
        worker(processes, broker, "max_num_seqs=8")
        admitted = await asyncio.wait_for(asyncio.gather(*(t for ts in tasks.values() for t in ts if not t.done())), 60)
    assert admitted == [200] * 20  # the skewed gateway's deadlines crossed as budgets, not as its clock
