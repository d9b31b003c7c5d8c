"""``Engine.submit`` is one template for every engine: the same admission, the same refusals, the
same answer to a request already cancelled or past its deadline (DESIGN §4)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

from rxpipe.engines import (
    BatchFunctionEngine,
    CompletionRequest,
    CompletionResult,
    Engine,
    EngineUnavailableError,
    OpenAIEngine,
    SimulatedEngine,
    TokenChunk,
)
from rxpipe.testing import TestSubscriber

from .helpers import engine as simulated

#: every engine with two slots; nothing here reaches OpenAIEngine's server (nothing listens on
#: port 9): its requests are answered at admission or cancelled before their call starts
ENGINES: dict[str, Callable[[], Engine]] = {
    "simulated": lambda: simulated(max_num_seqs=2),
    "batch_function": lambda: BatchFunctionEngine(lambda inputs: inputs, max_batch_size=2, max_delay_s=1.0),
    "openai": lambda: OpenAIEngine("http://127.0.0.1:9", "m", 2),
}
MODELS = {"simulated": "sim", "batch_function": "batch", "openai": "m"}


@pytest.fixture(params=sorted(ENGINES))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def prompt(**kwargs: Any) -> CompletionRequest:
    return CompletionRequest(prompt="abcd" * 3, max_tokens=2, **kwargs)  # 3 prompt tokens


def no_chunks(completion: Any) -> TestSubscriber[TokenChunk]:
    tokens = TestSubscriber[TokenChunk](initial_request=10)
    completion.tokens.subscribe(tokens)
    return tokens


def test_every_engine_uses_the_template() -> None:
    for make in (SimulatedEngine, BatchFunctionEngine, OpenAIEngine):
        assert make.submit is Engine.submit


@pytest.mark.virtual
async def test_a_request_cancelled_before_submit_is_finished_at_once_without_a_slot(
        kind: str, loop: asyncio.AbstractEventLoop) -> None:
    engine = ENGINES[kind]()
    freed: list[int] = []
    engine.add_capacity_listener(lambda: freed.append(engine.free_slots))
    await asyncio.sleep(2.0)
    request = prompt()
    request.cancel()
    completion = engine.submit(request)
    assert request.completion is completion and request.arrival_s == 2.0 and engine.loop is loop
    assert completion.done and completion.outcome == CompletionResult("", "cancelled", 3, 0, 0.0, None, 0.0)
    assert (engine.running, engine.waiting, engine.free_slots, freed) == (0, 0, 2, [])
    tokens = no_chunks(completion)
    assert tokens.values == [] and tokens.completed
    assert await completion.result == completion.outcome
    await engine.aclose()


@pytest.mark.virtual
async def test_a_request_past_its_deadline_is_finished_at_once_timed_from_its_arrival(kind: str) -> None:
    engine = ENGINES[kind]()
    await asyncio.sleep(2.0)
    completion = engine.submit(prompt(arrival_s=0.5, deadline_s=1.75))
    assert completion.outcome == CompletionResult("", "deadline", 3, 0, 1.5, None, 1.5)
    assert completion.request.arrival_s == 0.5 and (engine.running, engine.waiting) == (0, 0)
    assert no_chunks(completion).completed
    # a deadline not passed yet (equal to now) is admitted, and holds a slot until it ends
    admitted = engine.submit(prompt(deadline_s=2.0))
    assert not admitted.done and engine.running + engine.waiting == 1 and engine.free_slots == 1
    admitted.cancel()
    assert (await admitted.result).finish_reason == "cancelled"
    assert engine.free_slots == 2
    await engine.aclose()


@pytest.mark.virtual
async def test_a_request_submitted_twice_is_refused_and_keeps_its_first_completion(kind: str) -> None:
    engine = ENGINES[kind]()
    request = prompt()
    first = engine.submit(request)
    with pytest.raises(ValueError, match=f"^request {request.id} was already submitted$"):
        engine.submit(request)
    assert request.completion is first and not first.done
    assert engine.running + engine.waiting == 1 and engine.free_slots == 1
    first.cancel()
    assert (await first.result).finish_reason == "cancelled" and engine.free_slots == 2
    await engine.aclose()


@pytest.mark.virtual
async def test_an_unavailable_engine_refuses_and_leaves_the_request_untouched(kind: str) -> None:
    engine = ENGINES[kind]()
    await engine.aclose()
    request = prompt()
    with pytest.raises(EngineUnavailableError, match=f"^engine '{MODELS[kind]}' is closed$"):
        engine.submit(request)
    assert request.completion is None and request.arrival_s is None and engine.loop is None


def test_without_a_running_loop_submit_raises_and_leaves_the_request_untouched(kind: str) -> None:
    engine = ENGINES[kind]()
    request = prompt()
    with pytest.raises(RuntimeError, match="no running event loop"):
        engine.submit(request)
    assert request.completion is None and request.arrival_s is None and engine.loop is None
    asyncio.run(engine.aclose())


@pytest.mark.virtual
async def test_a_request_the_engine_cannot_map_is_refused_before_admission() -> None:
    def upper(request: CompletionRequest) -> str:
        if request.prompt is None:
            raise TypeError("this model reads prompts")
        return request.prompt.upper()

    batch = BatchFunctionEngine(lambda inputs: inputs, 2, 0.0, input=upper)
    openai = OpenAIEngine("http://127.0.0.1:9", "m", 2, chat=False)
    chat = CompletionRequest(messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(TypeError, match="reads prompts"):
        batch.submit(chat)
    with pytest.raises(ValueError, match="chat=False"):
        openai.submit(chat)
    with pytest.raises(ValueError, match="neither prompt nor messages"):
        openai.submit(CompletionRequest())
    assert chat.completion is None and chat.arrival_s is None
    assert batch.loop is None and openai.loop is None  # refused before binding to the loop
    done = batch.submit(CompletionRequest(prompt="hi", max_tokens=1))
    assert (await done.result).text == "HI"  # the mapped input is what start() received
    await batch.aclose()
    await openai.aclose()


@pytest.mark.virtual
async def test_the_simulated_engine_says_why_it_is_unavailable() -> None:
    engine = simulated()
    engine.down = True
    with pytest.raises(EngineUnavailableError, match="^engine 'sim' is down$"):
        engine.submit(prompt())
    engine.down = False
    await engine.aclose()
