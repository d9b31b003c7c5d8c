"""docs/openai-surface.md's examples work as written: each Python block runs as a script (the
``openai`` SDK, configured by ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` as the page says) against
``pipelines/llm_router.py`` in front of the stub backend, and prints what the stub's answers say."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests.engines.openai_stub_server import StubServer

from .router_helpers import ROOT, running_router

pytestmark = pytest.mark.loops("uvloop")

PAGE = (ROOT / "docs" / "openai-surface.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE, re.S)

#: what each example prints against the stub (its answers are deterministic)
EXPECTED = [
    "the model calls get_weather for city-1\nanswer:  the tool said {\"city\": \"city-1\", \"sky\": \"clear\"}\n"
    "usage: 3 + 4 tokens\n",
    "usage: 5 completion tokens\n0 get_weather {\"city\": \"city-1\"}\n",
    "{'city': 'city-1', 'population': 1}\n",
    "".join(f" t{i}" for i in range(100)) + "\n",
    "' t0' -0.25 [' t0', ' alt0']\n' t1' -0.26 [' t1', ' alt0']\n' t2' -0.27 [' t2', ' alt0']\n"
    "' t3' -0.28 [' t3', ' alt0']\n",
    "2 vectors of 4 dimensions; 8 prompt tokens\n",
    " w0 w1 w2 w3 w4 w5 w6 w7\n" + "".join(f"{t}\n" for t in [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        *["response.output_text.delta"] * 8, "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"]),
]


@pytest.fixture
def stub(tmp_path: Path) -> Iterator[StubServer]:
    server = StubServer(tmp_path)
    yield server
    server.stop()


def test_every_example_has_its_expected_output() -> None:
    assert len(BLOCKS) == len(EXPECTED) == 7
    assert all("from openai import OpenAI" in block and "OpenAI()" in block for block in BLOCKS)


async def test_the_pages_examples_run_against_the_router(stub: StubServer, tmp_path: Path) -> None:
    async with running_router(backends=stub.url, model="my-model", max_in_flight=4, cache_max_entries=0) as (url, _):
        env = {**os.environ, "OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "unused"}
        for n, (block, expected) in enumerate(zip(BLOCKS, EXPECTED, strict=True)):
            script = tmp_path / f"example_{n}.py"
            script.write_text(block)
            proc = await asyncio.create_subprocess_exec(sys.executable, str(script), env=env,
                                                        stdout=asyncio.subprocess.PIPE,
                                                        stderr=asyncio.subprocess.STDOUT)
            output, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
            assert proc.returncode == 0, (n, output.decode())
            assert output.decode() == expected, n
