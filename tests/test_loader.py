from __future__ import annotations

import sys
from pathlib import Path

import pytest

import rxpipe as rx
from rxpipe.loader import PipelineLoadError, load_pipeline, parse_settings, split_spec
from rxpipe.runtime import Pipeline


def test_parse_settings_json_else_string() -> None:
    assert parse_settings(["a=1", "b=x", "c=[1, 2]", "d=true", "e=", "f=1.5", 'g="q"', "h=a=b"]) == {
        "a": 1, "b": "x", "c": [1, 2], "d": True, "e": "", "f": 1.5, "g": "q", "h": "a=b"}


@pytest.mark.parametrize("bad", ["novalue", "=1", " =2"])
def test_parse_settings_rejects_malformed_pairs(bad: str) -> None:
    with pytest.raises(PipelineLoadError, match="key=value"):
        parse_settings([bad])


def test_split_spec() -> None:
    assert split_spec("p.py") == (Path("p.py"), "pipeline")
    assert split_spec("dir/p.py:evens") == (Path("dir/p.py"), "evens")


def test_factory_receives_the_config(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("import rxpipe as rx\n"
                                   "def pipeline(config):\n    return rx.just(*config['items'])\n")
    pipeline = load_pipeline(str(tmp_path / "f.py"), {"items": [1, 2]})
    assert isinstance(pipeline, Pipeline)
    assert pipeline.flowable.kind == "just"


def test_a_pipeline_file_imports_the_modules_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # README's "Write your own operator": pairs.py beside the pipeline file that uses it, as
    # `python FILE` would find it (the file's directory first on sys.path).
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "rxpipe_test_sibling_helper", raising=False)
    (tmp_path / "rxpipe_test_sibling_helper.py").write_text("ITEMS = (4, 5)\n")
    (tmp_path / "uses_helper.py").write_text("import rxpipe as rx\n"
                                             "from rxpipe_test_sibling_helper import ITEMS\n"
                                             "pipeline = rx.just(*ITEMS)\n")
    pipeline = load_pipeline(str(tmp_path / "uses_helper.py"))
    assert pipeline.flowable.kind == "just"
    assert sys.path[0] == str(tmp_path.resolve())


def test_factory_returning_garbage_is_refused(tmp_path: Path) -> None:
    (tmp_path / "g.py").write_text("def pipeline(config):\n    return 42\n")
    with pytest.raises(PipelineLoadError, match="not a Pipeline"):
        load_pipeline(str(tmp_path / "g.py"))


async def test_pipeline_run_and_start() -> None:
    got: list[int] = []
    pipeline = Pipeline(rx.range(0, 3), name="demo")
    assert await pipeline.run(got.append) == 3
    assert got == [0, 1, 2]
    async with pipeline.start(port=0) as running:
        assert running.url is None
        assert await running.wait() == 3
    assert running.done
