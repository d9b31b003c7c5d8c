"""``rxpipe run`` / ``rxpipe graph`` in a real subprocess (output to files, never unread pipes)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "pipelines" / "hello.py"

HELLO_LINES = [
    "#1: 1 (total 1)", "#2: 9 (total 10)", "#3: 25 (total 35)", "#4: 49 (total 84)",
    "#5: 81 (total 165)", "#6: 121 (total 286)", "#7: 169 (total 455)", "#8: 225 (total 680)",
    "#9: 289 (total 969)", "#10: 361 (total 1330)",
]


def rxpipe(tmp_path: Path, *args: str, cwd: Path = ROOT) -> tuple[int, str, str]:
    out, err = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.run([sys.executable, "-m", "rxpipe", *args], stdout=stdout, stderr=stderr,
                              cwd=cwd, timeout=60)
    return proc.returncode, out.read_text(), err.read_text()


def test_run_hello_prints_the_expected_items(tmp_path: Path) -> None:
    code, out, err = rxpipe(tmp_path, "run", "pipelines/hello.py")
    assert (code, err) == (0, "")
    assert out.splitlines() == HELLO_LINES


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_run_with_settings_and_loop_choice(tmp_path: Path, loop: str) -> None:
    code, out, _ = rxpipe(tmp_path, "run", str(HELLO), "--set", "count=3", "--loop", loop)
    assert code == 0
    assert out.splitlines() == HELLO_LINES[:3]


def test_run_named_attribute(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(textwrap.dedent("""
        import rxpipe as rx
        from rxpipe import operators as ops
        evens = rx.range(0, 7).pipe(ops.filter(lambda x: x % 2 == 0))
    """))
    code, out, err = rxpipe(tmp_path, "run", f"{tmp_path / 'p.py'}:evens")
    assert (code, out, err) == (0, "0\n2\n4\n6\n", "")


def test_error_while_running_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text(textwrap.dedent("""\
        import rxpipe as rx
        from rxpipe import operators as ops

        def boom(x):
            return 10 // (x - 3)

        pipeline = rx.range(0, 10).pipe(ops.map(boom))
    """))
    code, out, err = rxpipe(tmp_path, "run", "broken.py", cwd=tmp_path)
    assert code == 1
    assert out.splitlines() == ["-4", "-5", "-10"]
    assert err == "rxpipe: error: ZeroDivisionError: integer division or modulo by zero\n  at broken.py:5 in boom\n"


def test_error_while_loading_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("import rxpipe as rx\n\nx = 1\npipeline = rx.range(0, 3).pipe(undefined)\n")
    code, out, err = rxpipe(tmp_path, "run", "bad.py", cwd=tmp_path)
    assert (code, out) == (1, "")
    assert err == "rxpipe: error: NameError: name 'undefined' is not defined\n  at bad.py:4 in <module>\n"


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "syntax.py").write_text("import rxpipe\npipeline = (\n")
    code, _, err = rxpipe(tmp_path, "run", "syntax.py", cwd=tmp_path)
    assert code == 1
    assert err.startswith("rxpipe: error: SyntaxError:") and err.endswith("at syntax.py:2\n")


def test_missing_file_and_missing_attribute(tmp_path: Path) -> None:
    code, _, err = rxpipe(tmp_path, "run", "nope.py", cwd=tmp_path)
    assert (code, err) == (1, "rxpipe: error: nope.py: no such pipeline file\n")
    (tmp_path / "empty.py").write_text("x = 1\n")
    code, _, err = rxpipe(tmp_path, "run", "empty.py", cwd=tmp_path)
    assert code == 1 and "defines no 'pipeline'" in err


def test_settings_for_a_non_factory_are_refused(tmp_path: Path) -> None:
    (tmp_path / "fixed.py").write_text("import rxpipe as rx\npipeline = rx.just(1)\n")
    code, _, err = rxpipe(tmp_path, "run", "fixed.py", "--set", "a=1", cwd=tmp_path)
    assert code == 1 and "takes no --set settings (got a)" in err


def test_help_is_useful(tmp_path: Path) -> None:
    code, out, _ = rxpipe(tmp_path, "run", "--help")
    assert code == 0
    for needle in ("FILE[:NAME]", "--set KEY=VALUE", "--loop [uvloop|asyncio]", "--port", "--host"):
        assert needle in out


def test_graph_lists_fused_stages(tmp_path: Path) -> None:
    code, out, _ = rxpipe(tmp_path, "graph", "pipelines/hello.py")
    assert code == 0
    assert out.splitlines() == ["range_0  (range)", "square  (map, fused)", "odd  (filter, fused)",
                                "running_total  (scan, fused)", "format  (map, fused)",
                                "first  (take, fused)"]


def test_tune_gc_freezes_the_startup_heap_and_raises_the_youngest_threshold() -> None:
    import gc

    from rxpipe.cli import GC_THRESHOLD, _tune_gc

    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, saved[1], saved[2])
        _tune_gc()
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (GC_THRESHOLD, saved[1], saved[2])
        gc.set_threshold(50_000, saved[1], saved[2])
        _tune_gc()
        assert gc.get_threshold()[0] == 50_000  # never lowered
    finally:
        gc.unfreeze()
        gc.set_threshold(*saved)


def test_a_pipeline_without_an_http_edge_keeps_the_gc_settings() -> None:
    import asyncio
    import gc

    from rxpipe.cli import _serve
    from rxpipe.runtime import Pipeline
    from rxpipe.sources import from_iterable

    saved, frozen = gc.get_threshold(), gc.get_freeze_count()
    asyncio.run(_serve(Pipeline(from_iterable(range(3))), "127.0.0.1", 0))
    assert (gc.get_threshold(), gc.get_freeze_count()) == (saved, frozen)


def test_graph_shows_the_routers_backends_one_branch_each(tmp_path: Path) -> None:
    code, out, err = rxpipe(tmp_path, "graph", "pipelines/llm_router.py", "--set",
                            "backends=http://127.0.0.1:8001,http://user:pw@127.0.0.1:8002", "--set", "model=m")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "gateway  (gateway)", "queue  (edge_queue)", "cache  (cache)", "balance  (balance)",
        "  balance[0]  (balance_port)",
        "  executor_backend0  (execute; engine backend0: OpenAIEngine at http://127.0.0.1:8001/v1)",
        "  balance[1]  (balance_port)",
        "  executor_backend1  (execute; engine backend1: OpenAIEngine at http://user@127.0.0.1:8002/v1)"]
    code, out, _ = rxpipe(tmp_path, "graph", "pipelines/llm_router.py", "--set", "backends=http://127.0.0.1:8001",
                          "--set", "model=m", "--format", "mermaid")
    assert code == 0 and "  balance --> balance_0_" in out.splitlines() and "  balance_0_ --> executor_backend0" in out


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_reader_that_closes_the_pipe_ends_the_run_quietly(tmp_path: Path, loop: str) -> None:
    # `rxpipe run … | head -1`: the reader goes away after one line; no BrokenPipeError, status 0
    (tmp_path / "many.py").write_text("import rxpipe as rx\npipeline = rx.range(0, 10**7)\n")
    err = tmp_path / "stderr.txt"
    with err.open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "rxpipe", "run", str(tmp_path / "many.py"), "--loop", loop],
                                stdout=subprocess.PIPE, stderr=stderr, cwd=tmp_path)
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"0\n"
        proc.stdout.close()
        code = proc.wait(timeout=60)
    assert (code, err.read_text()) == (0, "")


def test_help_settings_of_a_file_without_a_schema_says_so(tmp_path: Path) -> None:
    (tmp_path / "plain.py").write_text("import rxpipe as rx\npipeline = rx.range(0, 3)\n")
    (tmp_path / "factory.py").write_text("import rxpipe as rx\n\ndef pipeline(config):\n    return rx.range(0, 3)\n")
    for name, takes in (("plain.py", "no settings"), ("factory.py", "settings its docstring describes")):
        code, out, err = rxpipe(tmp_path, "run", name, "--help-settings", cwd=tmp_path)
        assert (code, err) == (0, "")
        assert out == f"{name}: declares no SETTINGS schema (rxpipe.settings.Schema); 'pipeline' takes {takes}\n"



def test_run_a_shipped_pipeline_by_name_from_an_empty_directory(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = rxpipe(tmp_path, "run", "hello", "--set", "count=2", cwd=empty)
    assert (code, out.splitlines(), err) == (0, HELLO_LINES[:2], "")
    code, out, _ = rxpipe(tmp_path, "graph", "hello", cwd=empty)
    assert code == 0 and out.splitlines()[0] == "range_0  (range)"


def test_rxpipe_run_llm_gateway_from_an_empty_directory_serves(tmp_path: Path) -> None:
    import json
    import re
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    empty = tmp_path / "empty"
    empty.mkdir()
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rxpipe", "run", "llm_gateway", "--port", str(port)],
                                cwd=empty, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while "serving on" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        body = json.dumps({"model": "sim", "prompt": "Hello", "max_tokens": 4}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        assert answer["usage"]["completion_tokens"] == 4 and answer["object"] == "text_completion"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0
    assert re.search(rf"INFO rxpipe: llm_gateway serving on http://127\.0\.0\.1:{port}; engines: sim", log.read_text())
    assert list(empty.iterdir()) == []


def test_run_help_names_every_shipped_pipeline(tmp_path: Path) -> None:
    from rxpipe.loader import shipped_pipelines

    code, out, _ = rxpipe(tmp_path, "run", "--help")
    named = out[out.index("FILE is a path"):out.index("The attribute")]
    assert code == 0 and [n for n in shipped_pipelines() if n not in named] == []
