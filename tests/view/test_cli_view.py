"""``rxpipe run --status-port``, ``rxpipe top`` and ``rxpipe graph --format dot|svg`` as a user runs
them: real subprocesses, real ports, output to files."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

SLOW = textwrap.dedent("""\
    import asyncio
    import rxpipe as rx
    from rxpipe import operators as ops

    async def slow(x):
        await asyncio.sleep(0.05)   # deliberately slow: 2 at a time, 40 items/s at most
        return x

    pipeline = rx.Pipeline(rx.interval(0.001), ops.buffer(16, name="queue"),
                           ops.map_async(slow, concurrency=2, name="slow"),
                           ops.filter(lambda x: False, name="drop_all"), name="slow_demo")
""")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rxpipe(tmp_path: Path, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.run([sys.executable, "-m", "rxpipe", *args], stdout=stdout, stderr=stderr, cwd=ROOT,
                              timeout=timeout)
    return proc.returncode, out.read_text(), err.read_text()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_graph_draws_svg_and_dot(tmp_path: Path) -> None:
    code, out, err = rxpipe(tmp_path, "graph", "pipelines/embed_documents.py", "--format", "svg")
    assert (code, err) == (0, "")
    root = ET.fromstring(out)
    names = [g.get("data-stage") for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "stage"]
    assert names == ["from_iterable_0", "split", "broadcast_2", "broadcast_2[0]", "broadcast_2[1]", "map_4",
                     "batch", "embed", "unbatch", "pair", "format"]
    code, out, err = rxpipe(tmp_path, "graph", "pipelines/embed_documents.py", "--format", "dot")
    assert (code, err) == (0, "")
    assert '  "broadcast_2[0]" -> "pair";' in out.splitlines() and '  "unbatch" -> "pair";' in out.splitlines()


def test_status_port_serves_the_view_of_any_pipeline_and_top_shows_it(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(SLOW)
    port = free_port()
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "rxpipe", "run", str(tmp_path / "slow.py"), "--status-port",
                             str(port)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while f"live view on {url}/pipeline" not in (tmp_path / "run.log").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "run.log").read_text()
            time.sleep(0.05)
        snapshot: dict[str, Any] = {}
        while time.monotonic() < deadline:  # the figures cover the last 1-2 s: wait for a full window
            snapshot = get_json(f"{url}/pipeline.json")
            stages = {s["name"]: s for s in snapshot["stages"]}
            if (snapshot["bottleneck"] == "slow" and stages["queue"]["backpressured_ms_per_s"] >= 500
                    and stages["slow"]["busy_ms_per_s"] >= 500):
                break
            time.sleep(0.2)
        assert snapshot["bottleneck"] == "slow", snapshot
        stages = {s["name"]: s for s in snapshot["stages"]}
        assert list(stages) == ["interval_0", "queue", "slow", "drop_all"]
        assert stages["queue"]["backpressured_ms_per_s"] >= 500 and stages["slow"]["busy_ms_per_s"] >= 500
        code, out, err = rxpipe(tmp_path, "top", url, "--once")
        assert (code, err) == (0, "")
        assert "bottleneck: slow" in out
        rows = {line.split()[1] if line.split()[0] == "▶" else line.split()[0]
                for line in (re.sub(r"[│┃]", " ", raw).strip() for raw in out.splitlines()) if line}
        assert {"interval_0", "queue", "slow", "drop_all"} <= rows
        assert re.search(r"▶ slow\s", out)
        with urllib.request.urlopen(f"{url}/", timeout=10) as response:  # / redirects to the page
            assert response.url == f"{url}/pipeline" and b'data-stage="slow"' in response.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (tmp_path / "run.log").read_text()
        log.close()


def test_a_status_port_in_use_is_a_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = rxpipe(tmp_path, "run", "pipelines/hello.py", "--status-port", str(port))
    assert code == 1
    assert err.startswith(f"rxpipe: error: cannot serve the status page on 127.0.0.1:{port}: ")
    assert err.endswith("pick another --status-port\n")


def test_top_without_a_view_there_exits_1_with_the_reason(tmp_path: Path) -> None:
    code, out, err = rxpipe(tmp_path, "top", f"http://127.0.0.1:{free_port()}", "--once")
    assert (code, out) == (1, "")
    assert err.startswith("rxpipe top: error: http://127.0.0.1:") and "Cannot connect" in err
