from __future__ import annotations

import sys
from pathlib import Path

import pytest

import rxpipe as rx
from rxpipe.loader import PipelineLoadError, load_pipeline, parse_settings, resolve_spec, shipped_pipelines, split_spec
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


ROOT = Path(__file__).resolve().parent.parent


def test_the_shipped_pipelines_are_the_checkouts_pipeline_files() -> None:
    files = sorted(p.stem for p in (ROOT / "pipelines").glob("*.py") if not p.name.startswith("_"))
    assert list(shipped_pipelines()) == files == ["embed_documents", "hello", "llm_gateway", "llm_gateway_redis",
                                                  "llm_router", "llm_worker", "multi_user_chat",
                                                  "seed_petproject"]
    assert shipped_pipelines()["llm_gateway"].samefile(ROOT / "pipelines" / "llm_gateway.py")


def test_a_shipped_pipeline_is_found_by_name_from_any_directory(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # an empty directory: no pipelines/ folder here
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = list(sys.path)
    gateway = load_pipeline("llm_gateway", {"queue_capacity": 7})
    assert [stage.kind for stage in gateway.stages] == ["gateway", "rate_limit", "edge_queue", "batch", "execute"]
    assert gateway.stages[2].capacity == 7  # type: ignore[attr-defined]
    assert sys.path == before  # a shipped pipeline's folder is not put on sys.path
    assert resolve_spec("hello:pipeline") == (shipped_pipelines()["hello"], "pipeline")
    # a path keeps meaning that path
    (tmp_path / "hello").mkdir()
    assert resolve_spec("hello") == (Path("hello"), "pipeline")


def test_a_missing_pipeline_says_what_is_shipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineLoadError) as caught:
        load_pipeline("pipelines/llm_gateway.py")
    assert str(caught.value) == ("pipelines/llm_gateway.py: no such pipeline file; rxpipe ships llm_gateway: "
                                 "rxpipe run llm_gateway finds it from any directory")
    with pytest.raises(PipelineLoadError) as caught:
        load_pipeline("llm_gatway")
    assert str(caught.value) == ("llm_gatway: no such pipeline file; the pipelines shipped with rxpipe: "
                                 "embed_documents, hello, llm_gateway, llm_gateway_redis, llm_router, llm_worker, "
                                 "multi_user_chat, seed_petproject")
    with pytest.raises(PipelineLoadError, match=r"^mine\.py: no such pipeline file$"):
        load_pipeline("mine.py")
