"""The examples of README.md and of the manual's pages work as written (they are the newcomer's
first contact): every ``python`` block runs (by a test of its own where it needs a server, a file
layout or checked output, else as a script), every ``rxpipe run`` line builds its pipeline."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
#: the pages whose examples are run: README and every hand-written page of the manual
PAGES = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md"))]


def page(name: str) -> str:
    return (ROOT / name).read_text()


def section(text: str, heading: str) -> str:
    """The part of ``text`` from ``heading`` to the next heading of the same level."""
    start = text.index(heading)
    level = heading.split(" ", 1)[0]
    end = text.find(f"\n{level} ", start + len(heading))
    return text[start:end if end != -1 else None]


def python_blocks(where: str, heading: str | None = None) -> list[str]:
    """The ``python`` blocks of page ``where`` (README.md, docs/…), or of one section of it."""
    text = page(where) if where.endswith(".md") else where
    return re.findall(r"```python\n(.*?)```", section(text, heading) if heading else text, re.S)


def run(args: list[str], cwd: Path, tmp_path: Path) -> tuple[int, str]:
    out = tmp_path / "out.txt"
    with out.open("wb") as stdout:
        code = subprocess.run(args, cwd=cwd, stdout=stdout, stderr=subprocess.STDOUT, timeout=120).returncode
    return code, out.read_text()


def run_tests(tmp_path: Path, files: dict[str, str], test_file: str) -> str:
    """Write ``files`` into ``tmp_path`` and run pytest on ``test_file`` there, strictly; its output."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code, output = run([sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider", test_file],
                       tmp_path, tmp_path)
    assert code == 0, output
    return output


PLUGIN = 'pytest_plugins = ["rxpipe.testing.pytest_plugin"]\n'


def test_testing_section_example_passes(tmp_path: Path) -> None:
    conftest, test_file = python_blocks("docs/guides/testing.md")[:2]
    output = run_tests(tmp_path, {"conftest.py": conftest, "test_double_evens.py": test_file}, "test_double_evens.py")
    assert "3 passed" in output


def test_write_your_own_operator_example_passes(tmp_path: Path) -> None:
    (module,) = python_blocks("docs/tutorials/operator.md", "## Write it")
    (test_file,) = python_blocks("docs/tutorials/operator.md", "## Test it")
    assert "._" not in module and " _" not in module.replace(" __init__", "")  # no underscore name
    files = {"conftest.py": PLUGIN, "my_operators.py": module, "test_my_operators.py": test_file}
    assert "4 passed" in run_tests(tmp_path, files, "test_my_operators.py")


def test_the_readme_stage_counts_in_and_out_like_a_built_in(tmp_path: Path) -> None:
    # The kit exports the stage's statistics while it lives and its counters once it is gone:
    # rxpipe_stage_items_total never stays 0 (in) nor goes backwards (out).
    import gc
    import importlib.util

    from prometheus_client import REGISTRY

    from rxpipe.testing import TestPublisher, TestSubscriber

    (tmp_path / "readme_pairs.py").write_text(python_blocks("docs/tutorials/operator.md", "## Write it")[0])
    spec = importlib.util.spec_from_file_location("readme_pairs", tmp_path / "readme_pairs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def items(direction: str) -> float | None:
        return REGISTRY.get_sample_value("rxpipe_stage_items_total", {"stage": "readme_pairs", "direction": direction})

    pub, ts = TestPublisher[int](), TestSubscriber[tuple[int, int]]()
    pub.pipe(module.pairs(name="readme_pairs")).subscribe(ts)
    pub.emit(1, 2, 3, 4)
    ts.request(2)
    assert (items("in"), items("out")) == (4, 2)  # live
    pub.complete()
    ts.request(5)
    assert ts.values == [(1, 2), (2, 3), (3, 4)] and ts.completed
    del pub, ts
    gc.collect()
    assert (items("in"), items("out")) == (4, 3)  # retired


def test_write_your_own_engine_example_passes(tmp_path: Path) -> None:
    module, test_file = python_blocks("docs/tutorials/engine.md")
    assert re.findall(r"\b_[a-z]\w*", module) == []  # public names only
    files = {"conftest.py": PLUGIN, "my_engine.py": module, "test_my_engine.py": test_file}
    assert "3 passed" in run_tests(tmp_path, files, "test_my_engine.py")


def test_the_architecture_page_is_linked() -> None:
    assert "(docs/architecture.md)" in README and (ROOT / "docs" / "architecture.md").is_file()


def test_every_link_of_the_readme_reaches_a_file() -> None:
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README)
    assert len(links) >= 20 and [link for link in links if not (ROOT / link).is_file()] == []


def test_tour_examples_run(tmp_path: Path) -> None:
    blocks = [b for b in python_blocks("README.md", "## A short tour") if "def pipeline(config" not in b]
    assert len(blocks) == 2
    outputs = []
    for block in blocks:
        code, output = run([sys.executable, "-c", block], ROOT, tmp_path)
        assert code == 0, output
        outputs.append(output)
    assert outputs[1].splitlines() == ["[0, 1, 4, 9, 16]", "5 items"]
    embedded, serving = python_blocks("docs/tutorials/embed.md")
    assert embedded == blocks[1]  # the tour's is the tutorial's first
    code, output = run([sys.executable, "-c", serving], tmp_path, tmp_path)  # from a directory of its own
    assert code == 0, output
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+\nhttp://127\.0\.0\.1:\d+\n", output)


def test_real_engine_example_builds(tmp_path: Path) -> None:
    (block,) = python_blocks("docs/guides/operators.md")
    code, output = run([sys.executable, "-c", block + "\nprint([s.kind for s in pipeline.stages])"], ROOT, tmp_path)
    assert code == 0, output
    assert output == "['gateway', 'buffer', 'execute']\n"


def test_many_tenants_examples_are_the_same_valid_tenants_file(tmp_path: Path) -> None:
    from rxpipe.gateway import Tenants

    text = page("docs/tutorials/tenants.md")
    (json_text,) = re.findall(r"```json\n(.*?)```", text, re.S)
    (toml_text,) = re.findall(r"```toml\n(.*?)```", text, re.S)
    (tmp_path / "t.json").write_text(json_text)
    (tmp_path / "t.toml").write_text(toml_text)
    from_json, from_toml = Tenants.load(tmp_path / "t.json"), Tenants.load(tmp_path / "t.toml")
    assert dict(from_json) == dict(from_toml)
    assert from_json["acme"].weight == 2 and from_json["on-call"].priority == 1
    assert from_json.for_key("sk-hobby") == from_json["hobby"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("broker", ["redis", "nats"])
def test_beyond_one_machine_commands_run_as_written(broker: str, tmp_path: Path) -> None:
    """The shell block of "Beyond one machine" for each broker, run line by line (ports and
    directories moved to free ones): the broker, the gateway, a worker; then one streamed answer."""
    import shutil
    import socket
    import time
    import urllib.request

    from tests.redis.servers import free_port

    if broker == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (.ci/run installs it)")
    if not (ROOT / ".venv" / "bin" / "rxpipe").exists():
        pytest.skip("README's commands use the checkout's .venv")
    text = page("docs/tutorials/beyond-one-machine.md")
    start = text.index(f"<!-- beyond-one-machine: {broker} -->")
    (block,) = re.findall(r"```sh\n(.*?)```", text[start:text.index("```\n", start) + 4], re.S)
    ports = {"6380": str(free_port()), "4222": str(free_port()), "8000": str(free_port())}
    # the longest first: /tmp/rxpipe-nats.conf before /tmp/rxpipe-nats
    replacements = {**ports, "/tmp/rxpipe-nats.conf": str(tmp_path / "nats.conf"),
                    "/tmp/rxpipe-redis": str(tmp_path / "redis"), "/tmp/rxpipe-nats": str(tmp_path / "nats")}
    started: list[subprocess.Popen[bytes]] = []

    def wait_port(port: str) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", int(port)), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError(f"nothing listens on {port}")

    try:
        for n, line in enumerate(block.replace("\\\n", " ").strip().splitlines()):
            command = line.split("  #")[0].strip()
            for old, new in replacements.items():
                command = command.replace(old, new)
            if command.startswith("printf"):
                assert subprocess.run(command, shell=True, cwd=ROOT).returncode == 0
                continue
            log = (tmp_path / f"{n}.log").open("wb")
            started.append(subprocess.Popen(command, shell=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True))
            log.close()
            if "rxpipe run" not in command:
                wait_port(ports["6380" if broker == "redis" else "4222"])
            else:
                deadline = time.monotonic() + 30
                while "serving on" not in (tmp_path / f"{n}.log").read_text():
                    assert started[-1].poll() is None, (tmp_path / f"{n}.log").read_text()
                    assert time.monotonic() < deadline, (tmp_path / f"{n}.log").read_text()
                    time.sleep(0.1)
        body = b'{"model": "sim", "prompt": "hello", "max_tokens": 5, "stream": true}'
        request = urllib.request.Request(f"http://127.0.0.1:{ports['8000']}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
            events = [e for e in response.read().split(b"\n\n") if e]
        assert events[-1] == b"data: [DONE]" and len(events) == 7  # 5 tokens, the final chunk, [DONE]
    finally:
        import os
        import signal

        for process in reversed(started):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def test_beyond_the_gateway_is_the_pipeline_file_and_its_output(tmp_path: Path) -> None:
    text = page("docs/tutorials/embeddings.md")
    (code_block,) = python_blocks(text)
    source = (ROOT / "pipelines" / "embed_documents.py").read_text()
    assert source.endswith(code_block) and source[:-len(code_block)].rstrip().endswith('"""')  # after its docstring
    (shown,) = re.findall(r"```text\n(.*?)```", text, re.S)
    (command,) = re.findall(r"```sh\n(.*?)\n```", text, re.S)
    assert command == ".venv/bin/rxpipe run embed_documents"
    code, output = run([sys.executable, "-m", "rxpipe", "run", "embed_documents"], tmp_path, tmp_path)
    assert code == 0, output
    assert output == shown


# -- the commands of the README, as a new user pastes them -------------------------------------------
def sh_blocks() -> list[str]:
    """The ``sh`` blocks of README and of every page."""
    return [block for name in PAGES for block in re.findall(r"```sh\n(.*?)```", page(name), re.S)]


def sh_commands() -> list[str]:
    """Every command line of the ``sh`` blocks (``\\``-continued lines joined, comments cut)."""
    commands = []
    for block in sh_blocks():
        for command in block.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+#.*$", "", command).strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def test_every_command_calls_the_venvs_programs_by_the_path_the_install_gives_them() -> None:
    venv_bin = Path(sys.executable).parent
    assert (venv_bin / "rxpipe").is_file()  # what `pip install -e .` put there, and nowhere on PATH
    words = [word for command in sh_commands() for part in command.split("&&") for word in part.split()[:2]]
    assert not [w for w in words if w in ("rxpipe", "pip", "python")], "a bare rxpipe/pip/python in an sh block"
    assert ". .venv/bin/activate" in README


def test_every_rxpipe_run_line_of_the_readme_builds_its_pipeline() -> None:
    import shlex

    from rxpipe.engines import Engine
    from rxpipe.loader import load_pipeline, parse_settings

    built = 0
    for block in sh_blocks():
        models = {}  # pipeline file -> the model ids it serves, for the gateways and workers of one block
        for line in block.replace("\\\n", " ").splitlines():
            if ".venv/bin/rxpipe run" not in line:
                continue
            argv = shlex.split(re.sub(r"\s+#.*$", "", line).split("&&")[-1].rstrip("& "))
            args = argv[argv.index("run") + 1:]
            pairs = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
            pipeline = load_pipeline(args[0] if "/" not in args[0] else str(ROOT / args[0]), parse_settings(pairs))
            built += 1
            served = {getattr(stage, "config", None).model for stage in pipeline.stages  # type: ignore[union-attr]
                      if stage.kind == "gateway"}
            for stage in pipeline.stages:
                engine = getattr(stage, "engine", None)
                for e in getattr(engine, "engines", [engine]):
                    if isinstance(e, Engine):
                        served.add(e.model)
            models.setdefault(Path(args[0]).stem, set()).update(served)
        for gateway in ("llm_gateway_redis", "llm_gateway"):
            if gateway in models and "llm_worker" in models:
                # a worker's clients reach it through the gateway: both serve one model id
                assert models[gateway] == models["llm_worker"], block
    assert built >= 12


def test_the_llama_section_names_what_the_llama_extra_installs() -> None:
    text = page("docs/tutorials/backends.md")
    start = text.index("In front of two llama.cpp servers")
    (block,) = re.findall(r"```sh\n(.*?)```", text[start:text.index("\n## ", start) if "\n## " in text[start:]
                                                      else None], re.S)
    assert "pip install -e '.[llama]'" in block and "llama-server" not in block
    servers = [line for line in block.splitlines() if "-m llama_cpp.server" in line]
    assert len(servers) == 2
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("the llama extra is not installed: its server's flags cannot be checked")
    out = subprocess.run([sys.executable, "-m", "llama_cpp.server", "--help"], capture_output=True, text=True,
                         timeout=120).stdout
    for flag in set(re.findall(r"(--\w+)", " ".join(servers))):
        assert flag in out, flag


def test_the_redis_example_neither_takes_port_6379_nor_writes_into_the_current_directory(tmp_path: Path) -> None:
    import shutil
    import socket
    import time

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    (line,) = [c for c in sh_commands() if "redis-server" in c]
    assert "--port 6380" in line and "--dir /tmp/rxpipe-redis" in line and "6379" not in line
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # the README's line as is, but on a free port and a data directory of this test's
    command = line.replace("6380", str(port)).replace("/tmp/rxpipe-redis", str(tmp_path / "data"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    with (tmp_path / "redis.log").open("wb") as log:  # exec: the shell becomes redis-server (killed below)
        proc = subprocess.Popen(["sh", "-c", command.replace("redis-server", "exec redis-server")], cwd=cwd,
                                stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                    sock.sendall(b"SET k v\r\n")
                    if sock.recv(64).startswith(b"+OK"):
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "redis.log").read_text()
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert list(cwd.iterdir()) == []
    assert [p.name for p in (tmp_path / "data").iterdir()]  # its append-only files are there


def test_the_operator_list_names_every_public_operator_and_source() -> None:
    import rxpipe as rx
    from rxpipe import operators as ops

    text = page("docs/guides/operators.md")
    named = set(re.findall(r"`(\w+)[(`]", text))
    assert sorted(set(ops.__all__) - named) == []
    static = set(re.findall(r"`rx\.(\w+)", text))
    assert {"zip", "merge", "concat", "combine_latest", "timer", "never", "from_future"} <= static
    assert all(hasattr(rx, name) for name in static)


# -- every python block of every page runs --------------------------------------------------------
#: the blocks a test above runs (a file layout, a server, checked output): (page, index) -> that test
RUN_BY = {
    ("README.md", 0): "test_tour_examples_run (a factory, built by the pipelines' own tests)",
    ("README.md", 1): "test_tour_examples_run",
    ("README.md", 2): "test_tour_examples_run",
    ("docs/guides/pipelines.md", 0): "test_tour_examples_run (the README's factory)",
    ("docs/guides/testing.md", 0): "test_testing_section_example_passes",
    ("docs/guides/testing.md", 1): "test_testing_section_example_passes",
    ("docs/guides/operators.md", 0): "test_real_engine_example_builds",
    ("docs/tutorials/embed.md", 0): "test_tour_examples_run",
    ("docs/tutorials/embed.md", 1): "test_tour_examples_run",
    ("docs/tutorials/embeddings.md", 0): "test_beyond_the_gateway_is_the_pipeline_file_and_its_output",
    ("docs/tutorials/engine.md", 0): "test_write_your_own_engine_example_passes",
    ("docs/tutorials/engine.md", 1): "test_write_your_own_engine_example_passes",
    ("docs/tutorials/gateway.md", 0): "test_the_openai_client_example_talks_to_a_gateway",
    ("docs/tutorials/operator.md", 0): "test_write_your_own_operator_example_passes",
    ("docs/tutorials/operator.md", 1): "test_write_your_own_operator_example_passes",
}


def every_block() -> dict[tuple[str, int], str]:
    return {(name, k): block for name in PAGES for k, block in enumerate(python_blocks(name))}


def test_every_block_a_test_runs_exists_and_names_its_test() -> None:
    blocks = every_block()
    assert sorted(set(RUN_BY) - set(blocks)) == []
    for test in RUN_BY.values():
        assert test.split(" ")[0] in globals(), test
    assert (README.count("```python"), len([k for k in blocks if k[0] == "README.md"])) == (3, 3)


@pytest.mark.parametrize("key", sorted(set(every_block()) - set(RUN_BY)), ids=lambda k: f"{k[0]}#{k[1]}")
def test_every_other_python_block_runs_as_a_script(key: tuple[str, int], tmp_path: Path) -> None:
    # from an empty directory of its own: an example may write files, and finds pipelines by name
    code, output = run([sys.executable, "-c", every_block()[key]], tmp_path, tmp_path)
    assert code == 0, output


def test_the_design_example_prints_what_it_says(tmp_path: Path) -> None:
    (block,) = python_blocks("docs/design.md")
    code, output = run([sys.executable, "-c", block], tmp_path, tmp_path)
    assert (code, output) == (0, "[1, 9, 25, 49, 81]\n")


def test_the_marble_drawing_example_writes_its_picture(tmp_path: Path) -> None:
    (block,) = python_blocks("docs/tutorials/operator.md", "## Draw its marble diagram")
    code, output = run([sys.executable, "-c", block], tmp_path, tmp_path)
    assert (code, output) == (0, '<svg xmlns="http://www.\n')
    svg = (tmp_path / "pairs.svg").read_text()
    assert svg.count("<circle") == 5 and "output: pairs(): x = (a, b), y = (b, c)" in svg


@pytest.mark.timeout(120)
def test_the_openai_client_example_talks_to_a_gateway(tmp_path: Path) -> None:
    from tests.gateway.server import GatewayProcess

    (block,) = python_blocks("docs/tutorials/gateway.md")
    gateway = GatewayProcess(tmp_path)
    try:
        code, output = run([sys.executable, "-c", block.replace("http://127.0.0.1:8000", gateway.url)],
                           tmp_path, tmp_path)
    finally:
        gateway.terminate()
    assert code == 0, output
    first, second = output.splitlines()
    assert first.strip() and second.strip()  # 16 simulated tokens, unary then streamed
