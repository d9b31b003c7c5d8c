"""SimulatedEngine honours the sampling fields a client can see: ``stop`` and ``seed`` (DESIGN §5),
and treats a ``max_tokens`` the edge filled in as a cap."""

from __future__ import annotations

import pytest

from rxpipe.engines import CompletionRequest, SimulatedEngine


def sim(**kwargs: object) -> SimulatedEngine:
    return SimulatedEngine(max_num_seqs=8, step_overhead_s=0.001, **kwargs)  # type: ignore[arg-type]


async def answer(engine: SimulatedEngine, **fields: object) -> tuple[str, str, int]:
    result = await engine.submit(CompletionRequest(**fields)).result  # type: ignore[arg-type]
    return result.text, result.finish_reason, result.completion_tokens


@pytest.mark.virtual
async def test_a_request_seed_gives_the_same_answer_whatever_came_before() -> None:
    fresh, busy = sim(), sim()
    for i in range(5):  # other traffic first moves the engine's own random stream
        await answer(busy, prompt=f"other {i}")
    same = [await answer(e, prompt="hello", sampling={"seed": 42}) for e in (fresh, busy, fresh)]
    assert same[0] == same[1] == same[2]
    other_seed = await answer(fresh, prompt="hello", sampling={"seed": 43})
    unseeded = [await answer(fresh, prompt="hello") for _ in range(2)]
    assert other_seed != same[0] and unseeded[0] != unseeded[1]


@pytest.mark.virtual
async def test_stop_ends_the_output_before_the_stop_string() -> None:
    engine = sim()
    text, reason, tokens = await answer(engine, prompt="p", max_tokens=40, sampling={"seed": 1})
    words = text.split(" ")[1:]  # one word per token, each with a leading space
    assert (reason, tokens, len(words)) == ("length", 40, 40)
    stop_word = words[6]
    first = words.index(stop_word)
    cut, cut_reason, cut_tokens = await answer(engine, prompt="p", max_tokens=40,
                                               sampling={"seed": 1, "stop": [" " + stop_word, "never-there"]})
    assert (cut, cut_reason, cut_tokens) == ("".join(" " + w for w in words[:first]), "stop", first)
    assert stop_word not in cut.split(" ")
    # a stop string that never appears changes nothing
    assert await answer(engine, prompt="p", max_tokens=40, sampling={"seed": 1, "stop": "zzz"}) == (text, reason, 40)


@pytest.mark.virtual
async def test_a_defaulted_max_tokens_caps_the_drawn_length() -> None:
    engine = sim(output_tokens=(16, 32))
    capped = [await answer(engine, prompt=f"p{i}", max_tokens=20, max_tokens_defaulted=True) for i in range(12)]
    assert all(16 <= n <= 20 for _, _, n in capped)
    assert {reason for _, reason, n in capped if n < 20} <= {"stop"}
    assert {reason for _, reason, n in capped if n == 20} <= {"length"} and any(n == 20 for _, _, n in capped)
    exact = await answer(engine, prompt="q", max_tokens=20)
    assert exact[1:] == ("length", 20)


@pytest.mark.virtual
@pytest.mark.parametrize("mode", ["batching", "per_request"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_stop_string_in_the_first_token_gives_an_empty_answer(mode: str, stream: bool) -> None:
    engine = sim() if mode == "batching" else SimulatedEngine.per_request(2)
    text, _, _ = await answer(engine, prompt="p", max_tokens=5, sampling={"seed": 9})
    first_word = text.split(" ")[1]
    completion = engine.submit(CompletionRequest(prompt="p", max_tokens=5, stream=stream,
                                                 sampling={"seed": 9, "stop": " " + first_word}))
    chunks = [chunk async for chunk in completion.tokens.iterate(2)] if stream else []
    result = await completion.result
    assert (result.text, result.finish_reason, result.completion_tokens, chunks) == ("", "stop", 0, [])


@pytest.mark.virtual
async def test_temperature_0_is_greedy_and_a_prompt_extended_by_an_answer_continues_it_exactly() -> None:
    e, other = SimulatedEngine(seed=3), SimulatedEngine(seed=3)  # another process would agree: CRC-32
    greedy = {"temperature": 0}
    whole = (await e.submit(CompletionRequest(prompt="once upon a time", max_tokens=12, sampling=greedy)).result).text
    assert whole == (await other.submit(CompletionRequest(prompt="once upon a time", max_tokens=12,
                                                          sampling=greedy)).result).text
    words = whole.split(" ")[1:]
    assert len(words) == 12
    head = "".join(" " + w for w in words[:5])
    rest = await e.submit(CompletionRequest(prompt="once upon a time" + head, max_tokens=7, sampling=greedy)).result
    assert head + rest.text == whole
    chat = [{"role": "user", "content": "once upon a time"}, {"role": "assistant", "content": head}]
    assert head + (await e.submit(CompletionRequest(messages=chat, max_tokens=7, sampling=greedy)).result).text == whole
    sampled = await e.submit(CompletionRequest(prompt="once upon a time", max_tokens=12)).result
    assert sampled.text != whole  # sampled text does not follow the greedy chain
