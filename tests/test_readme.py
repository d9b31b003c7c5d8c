"""README.md's examples work as written (they are the newcomer's first contact)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def python_blocks(section: str) -> list[str]:
    start = README.index(section)
    end = README.find("\n## ", start + len(section))
    return re.findall(r"```python\n(.*?)```", README[start:end if end != -1 else None], re.S)


def run(args: list[str], cwd: Path, tmp_path: Path) -> tuple[int, str]:
    out = tmp_path / "out.txt"
    with out.open("wb") as stdout:
        code = subprocess.run(args, cwd=cwd, stdout=stdout, stderr=subprocess.STDOUT, timeout=120).returncode
    return code, out.read_text()


def test_testing_section_example_passes(tmp_path: Path) -> None:
    conftest, test_file = python_blocks("## Testing your operators")[:2]
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_double_evens.py").write_text(test_file)
    code, output = run([sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider",
                        "test_double_evens.py"], tmp_path, tmp_path)
    assert code == 0, output
    assert "3 passed" in output


def test_write_your_own_operator_example_passes(tmp_path: Path) -> None:
    module, test_file = python_blocks("## Write your own operator")
    assert "._" not in module and " _" not in module.replace(" __init__", "")  # no underscore name
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["rxpipe.testing.pytest_plugin"]\n')
    (tmp_path / "my_operators.py").write_text(module)
    (tmp_path / "test_my_operators.py").write_text(test_file)
    code, output = run([sys.executable, "-m", "pytest", "-q", "-W", "error", "-p", "no:cacheprovider",
                        "test_my_operators.py"], tmp_path, tmp_path)
    assert code == 0, output
    assert "4 passed" in output


def test_the_readme_stage_counts_in_and_out_like_a_built_in(tmp_path: Path) -> None:
    # The kit exports the stage's statistics while it lives and its counters once it is gone:
    # rxpipe_stage_items_total never stays 0 (in) nor goes backwards (out).
    import gc
    import importlib.util

    from prometheus_client import REGISTRY

    from rxpipe.testing import TestPublisher, TestSubscriber

    (tmp_path / "readme_pairs.py").write_text(python_blocks("## Write your own operator")[0])
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


def test_the_architecture_page_is_linked() -> None:
    assert "(docs/architecture.md)" in README and (ROOT / "docs" / "architecture.md").is_file()


def test_tour_examples_run(tmp_path: Path) -> None:
    blocks = [b for b in python_blocks("## A short tour") if "def pipeline(config" not in b]
    assert len(blocks) == 3
    outputs = []
    for block in blocks:
        code, output = run([sys.executable, "-c", block], ROOT, tmp_path)
        assert code == 0, output
        outputs.append(output)
    assert outputs[1].splitlines() == ["[0, 1, 4, 9, 16]", "5 items"]
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+\nhttp://127\.0\.0\.1:\d+\n", outputs[2])


def test_real_engine_example_builds(tmp_path: Path) -> None:
    (block,) = python_blocks("## Operators and engines")
    code, output = run([sys.executable, "-c", block + "\nprint([s.kind for s in pipeline.stages])"], ROOT, tmp_path)
    assert code == 0, output
    assert output == "['gateway', 'buffer', 'execute']\n"


def test_many_tenants_examples_are_the_same_valid_tenants_file(tmp_path: Path) -> None:
    from rxpipe.gateway import Tenants

    start = README.index("## Many tenants")
    section = README[start:README.find("\n## ", start + 1)]
    (json_text,) = re.findall(r"```json\n(.*?)```", section, re.S)
    (toml_text,) = re.findall(r"```toml\n(.*?)```", section, re.S)
    (tmp_path / "t.json").write_text(json_text)
    (tmp_path / "t.toml").write_text(toml_text)
    from_json, from_toml = Tenants.load(tmp_path / "t.json"), Tenants.load(tmp_path / "t.toml")
    assert dict(from_json) == dict(from_toml)
    assert from_json["acme"].weight == 2 and from_json["on-call"].priority == 1
    assert from_json.for_key("sk-hobby") == from_json["hobby"]
