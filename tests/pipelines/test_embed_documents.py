"""pipelines/embed_documents.py: documents → flat_map chunks → batch + map_async embed → zip back,
bounded end to end (README "Beyond the gateway" runs it through ``rxpipe run``)."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import rxpipe as rx
from rxpipe.testing import TestSubscriber, run_virtual

PIPELINE = Path(__file__).resolve().parents[2] / "pipelines" / "embed_documents.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("embed_documents_under_test", PIPELINE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_chunk_is_paired_with_its_own_vector_in_order() -> None:
    module = load()
    calls: list[list[str]] = []

    async def recording(texts: list[str]) -> list[Any]:
        calls.append(texts)
        await asyncio.sleep(0.01 * len(texts))
        return [("vector of", text) for text in texts]  # the vector names its text

    module.embed_batch = recording
    module.DOCUMENTS = [(f"d{k}", " ".join(f"w{k}.{i}" for i in range(k % 5 + 1))) for k in range(40)]
    lines = run_virtual(module.pipeline({"chunk_words": 2}).to_list())
    chunks = [chunk for doc in module.DOCUMENTS for chunk in module.split(doc, 2)]
    assert lines == [f"{cid:8} {['vector of', text]}  {text!r}" for cid, text in chunks]
    assert sum(len(c) for c in calls) == len(chunks) and max(len(c) for c in calls) <= 8


def test_a_stalled_model_stops_the_document_source_within_the_bounds() -> None:
    module = load()
    pulled: list[int] = []
    stalled: list[list[str]] = []

    def documents() -> Any:
        for k in range(10_000):
            pulled.append(k)
            yield (f"d{k}", "one two three four five six seven")  # 2 chunks of 6 words at most

    async def stall(texts: list[str]) -> list[Any]:
        stalled.append(texts)
        await asyncio.Event().wait()  # the model never answers
        return []

    module.embed_batch = stall
    module.DOCUMENTS = documents()

    async def main() -> None:
        ts = TestSubscriber[str](initial_request=rx.UNBOUNDED)
        module.pipeline({}).subscribe(ts)
        await asyncio.sleep(5)
        # 2 calls in flight (8 chunks each); broadcast passes at most what zip's side asked (32
        # chunks = 16 documents) and flat_map holds at most 16 documents more: the source stops
        assert len(stalled) == 2 and all(len(batch) == 8 for batch in stalled)
        assert 16 < len(pulled) <= 16 + 32 // 2 and ts.values == []
        ts.cancel()

    run_virtual(main())


def test_bad_settings_are_refused() -> None:
    module = load()
    with pytest.raises(ValueError, match="chunk_words"):
        module.pipeline({"chunk_words": 0})
    with pytest.raises(ValueError, match="unknown setting"):
        module.pipeline({"chunk_size": 3})
