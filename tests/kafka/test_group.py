"""The consumer group in real processes (``pipelines/llm_gateway.py`` and ``pipelines/llm_worker.py``
with ``broker_url=kafka://…``, a real Tansu broker): a generation longer than
``max_poll_interval_ms`` keeps its partitions (C16), and a rebalance does not run twice what a
survivor finished."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from tests.redis.servers import PipelineProcess
from tests.redis.test_pipelines_process import complete, session, streamed_text
from tests.transport.helpers import gateway, sample, worker, worker_metrics

from .conftest import Processes
from .servers import TansuServer

pytestmark = pytest.mark.loops("asyncio")


def assignments(process: PipelineProcess) -> list[int]:
    """The numbers of the partition assignments the worker logged (1, 2, ...)."""
    return [int(n) for n in re.findall(r"assigned \(assignment (\d+)\)", process.output)]


async def logged(process: PipelineProcess, needle: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while needle not in process.output:
        assert time.monotonic() < deadline, f"{needle!r} not logged: {process.output}"
        await asyncio.sleep(0.05)


def ok(process: PipelineProcess) -> float:
    return sample(worker_metrics(process), "rxpipe_requests_finished_total", outcome="ok")


@pytest.mark.timeout(90)
async def test_generations_longer_than_max_poll_interval_keep_the_partitions_each_answered_once(
        tansu: TansuServer, processes: Processes) -> None:
    """C16: the engine's one slot is busy for ~5 s at a time (max_poll_interval_ms is 3 s) while
    more requests wait on the topic; the worker wants none then, so its partitions are paused and
    it polls all the same: it is never kicked out of the group, nothing runs twice."""
    max_poll_s = tansu.worker_options["max_poll_interval_ms"] / 1000
    gw = gateway(processes, tansu)
    wk = worker(processes, tansu, "max_num_seqs=1", "step_overhead_s=0.05", "consumer=w1")
    await logged(wk, "assigned (assignment 1)")
    long_tokens, short_tokens = 100, 3
    async with session() as http:
        started = time.monotonic()
        tasks = [asyncio.ensure_future(complete(http, gw.url, f"long {i}", long_tokens, stream=i == 0))
                 for i in range(2)]
        await asyncio.sleep(0.5)
        tasks += [asyncio.ensure_future(complete(http, gw.url, f"short {i}", short_tokens)) for i in range(2)]
        results = await asyncio.wait_for(asyncio.gather(*tasks), 60)
    elapsed = time.monotonic() - started
    assert elapsed > 2 * max_poll_s  # each long generation outlived max_poll_interval_ms
    for i, (status, _, body, _) in enumerate(results):
        assert status == 200, body
        text = streamed_text(body)[0] if i == 0 else body["choices"][0]["text"]
        assert len(text.split()) == (long_tokens if i < 2 else short_tokens), text
    assert ok(wk) == 4  # each run once
    assert assignments(wk) == [1], wk.output  # never a rebalance
    assert "leave" not in wk.output.lower() and "Heartbeat failed" not in wk.output, wk.output


@pytest.mark.timeout(90)
async def test_a_survivor_of_a_rebalance_skips_what_it_finished_behind_a_long_request(
        tansu: TansuServer, processes: Processes) -> None:
    """w1 alone owns the 8 partitions; a long request in partition 0 holds back that partition's
    commits while the short requests behind it finish. w2 joins: the group rebalances, w1 keeps
    partition 0 (round-robin over the sorted members: 0, 2, 4, 6) and reads it again from its
    commit point: the long request (held) and the finished short ones are not run again."""
    gw = gateway(processes, tansu)
    w1 = worker(processes, tansu, "max_num_seqs=4", "step_overhead_s=0.05", "consumer=w1")
    await logged(w1, "assigned (assignment 1)")
    shorts = 23  # requests 1..23 go round-robin to partitions 1..7, 0, 1, ...: 8 and 16 behind the long one
    async with session() as http:
        long = asyncio.ensure_future(complete(http, gw.url, "long", 250, stream=True))
        deadline = time.monotonic() + 20
        while sample(worker_metrics(w1), "rxpipe_engine_running_seqs", engine="sim") < 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        answers = await asyncio.wait_for(asyncio.gather(*(complete(http, gw.url, f"short {i}", 4)
                                                          for i in range(shorts))), 30)
        assert [a[0] for a in answers] == [200] * shorts
        assert not long.done()
        w2 = worker(processes, tansu, "max_num_seqs=4", "step_overhead_s=0.05", "consumer=w2")
        await logged(w1, "partitions [0, 2, 4, 6] of rxpipe.requests assigned (assignment 2)")
        await logged(w2, "partitions [1, 3, 5, 7] of rxpipe.requests assigned (assignment 1)")
        assert not long.done()  # the rebalance came while it ran
        status, _, body, _ = await asyncio.wait_for(long, 60)
    assert status == 200
    assert len(streamed_text(body)[0].split()) == 250
    await asyncio.sleep(1.0)  # anything run again would have finished by now
    assert (ok(w1), ok(w2)) == (shorts + 1, 0)
