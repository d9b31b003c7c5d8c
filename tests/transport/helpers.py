"""Helpers of the cross-host tests: pipeline processes on a broker, raw HTTP clients, metrics."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from pathlib import Path
from typing import Any

import orjson
from prometheus_client.parser import text_string_to_metric_families

from tests.redis.conftest import Processes
from tests.redis.servers import PipelineProcess, free_port

#: a ``sitecustomize`` that shifts this process's wall clock (``time.time``) by
#: ``RXPIPE_TEST_CLOCK_OFFSET_S`` seconds: a host whose clock is off
SKEW = '''import os, time
_offset = float(os.environ.get("RXPIPE_TEST_CLOCK_OFFSET_S", "0") or 0)
if _offset:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _offset
    time.time_ns = lambda: _time_ns() + int(_offset * 1e9)
'''


def skewed_env(tmp_path: Path, offset_s: float) -> dict[str, str]:
    """The environment of a process whose wall clock is ``offset_s`` seconds off."""
    folder = tmp_path / "skew"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(SKEW)
    return {"PYTHONPATH": str(folder), "RXPIPE_TEST_CLOCK_OFFSET_S": repr(offset_s)}


def _options(broker: Any, side: str) -> tuple[str, ...]:
    """``broker_url=…`` and the ``--set`` pairs a broker's ``side`` (``worker``/``gateway``) starts
    with (``broker`` a URL, or a broker fixture with ``worker_options``/``gateway_options``)."""
    if isinstance(broker, str):
        return (f"broker_url={broker}",)
    extra = getattr(broker, f"{side}_options", {})
    return (f"broker_url={broker.url}", *(f"{key}={value}" for key, value in extra.items()))


def gateway(processes: Processes, broker: Any, *settings: str, env: dict[str, str] | None = None) -> PipelineProcess:
    return processes.start("llm_gateway.py", *_options(broker, "gateway"), *settings, port=free_port(), env=env)


def worker(processes: Processes, broker: Any, *settings: str, wait: bool = True) -> PipelineProcess:
    return processes.start("llm_worker.py", *_options(broker, "worker"), *settings, wait=wait,
                           metrics_port=free_port())


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a /metrics page: (name, labels) -> value."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def worker_metrics(process: PipelineProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return scrape(f"http://127.0.0.1:{process.metrics_port}/metrics")


def histogram_quantile(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
                       q: float) -> float:
    """The upper bound of the bucket holding quantile ``q`` of a histogram (``inf`` beyond the last)."""
    buckets = sorted((float(dict(labels)["le"]), value) for (n, labels), value in samples.items()
                     if n == f"{name}_bucket")
    total = buckets[-1][1] if buckets else 0.0
    for le, count in buckets:
        if count >= q * total:
            return le
    return float("inf")


def request_bytes(body: dict[str, Any]) -> bytes:
    raw = orjson.dumps(body)
    return (b"POST /v1/completions HTTP/1.1\r\nHost: rxpipe\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%b" % (len(raw), raw))


async def abandon(port: int, body: dict[str, Any], wait_s: float) -> bool:
    """Send a request and leave: after its first token event (streamed; True) or after ``wait_s``
    (still queued, or a unary answer not ready; False). The connection is reset, as a client
    that goes away does."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes(body))
    decoding = False
    try:
        if body.get("stream"):
            try:
                await asyncio.wait_for(reader.readuntil(b"data: "), wait_s)
                decoding = True
            except TimeoutError:
                pass
        else:
            await asyncio.sleep(wait_s)
    finally:
        writer.transport.abort()
    return decoding


def stalled_reader(port: int, body: dict[str, Any]) -> socket.socket:
    """A client that sends a streamed request and never reads (a 4 KiB receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request_bytes(body))
    return sock


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")
