"""A small engine written the way a user writes one: rxpipe's public names only.

``test_custom_engine.py`` checks that this file holds no underscore name (dunders aside): what an
engine author needs is public. It answers a prompt with the prompt's own words, one token every
``token_s`` seconds of the loop clock.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rxpipe.engines import Completion, CompletionRequest, CompletionResult, Engine


@dataclass(eq=False)
class Echo:
    """What the engine keeps of one request (its ``completion.engine_state``)."""

    words: list[str]
    reason: str  # "length" when max_tokens cut the prompt's words, else "stop"
    started_s: float
    sent: int = 0
    first_token_s: float | None = None
    timer: asyncio.TimerHandle | None = None
    parked: bool = False  # a streamed request waiting for its consumer's credit


class EchoEngine(Engine):
    """Echo the prompt's words, one token per ``token_s`` seconds, ``max_num_seqs`` at once.

    A request holds a slot from admission to its end (no waiting queue: the executor never
    admits more than the free slots). A streamed request makes a token only while its consumer
    has credit. Chat requests are refused (ValueError): the engine answers prompts only.
    """

    def __init__(self, max_num_seqs: int = 2, token_s: float = 0.25) -> None:
        super().__init__(model="echo", max_num_seqs=max_num_seqs)
        self.token_s = token_s
        self.closed = False
        self.serving: set[Completion] = set()

    @property
    def running(self) -> int:
        return len(self.serving)

    @property
    def waiting(self) -> int:
        return 0

    @property
    def available(self) -> bool:
        return not self.closed

    @property
    def unavailable_reason(self) -> str:
        return "closed"

    def prepare(self, request: CompletionRequest) -> list[str]:
        if request.prompt is None:
            raise ValueError(f"EchoEngine answers prompts: request {request.id} has chat messages")
        return request.prompt.split()

    def start(self, completion: Completion, now_s: float) -> None:
        words: list[str] = completion.engine_state
        limit = completion.request.max_tokens
        cut = limit is not None and len(words) > limit
        completion.engine_state = Echo(words[:limit] if cut else words, "length" if cut else "stop", now_s)
        self.serving.add(completion)
        self.schedule(completion)

    def schedule(self, completion: Completion) -> None:
        loop = self.loop
        assert loop is not None
        completion.engine_state.timer = loop.call_later(self.token_s, self.step, completion)

    def step(self, completion: Completion) -> None:
        echo: Echo = completion.engine_state
        echo.timer = None
        if echo.sent < len(echo.words):
            if completion.request.stream and not completion.credit:
                echo.parked = True  # credit_granted resumes it
                return
            if echo.first_token_s is None:
                echo.first_token_s = self.loop.time()  # type: ignore[union-attr]
            echo.sent += 1
            completion.push(" " + echo.words[echo.sent - 1], 1)
            if completion.done:
                return  # its consumer cancelled it on delivery
        if echo.sent == len(echo.words):
            self.end(completion, echo.reason)
        else:
            self.schedule(completion)

    def end(self, completion: Completion, reason: str) -> None:
        echo: Echo = completion.engine_state
        if echo.timer is not None:
            echo.timer.cancel()
            echo.timer = None
        self.serving.discard(completion)
        request = completion.request
        now = self.loop.time()  # type: ignore[union-attr]
        arrival = request.arrival_s if request.arrival_s is not None else now
        first = None if echo.first_token_s is None else echo.first_token_s - arrival
        text = "".join(" " + word for word in echo.words[:echo.sent])
        completion.finish(CompletionResult(text, reason, request.prompt_tokens, echo.sent,
                                           echo.started_s - arrival, first, now - arrival))
        self.notify_capacity()

    def cancel_completion(self, completion: Completion) -> None:
        if completion in self.serving:
            self.end(completion, "cancelled")

    def credit_granted(self, completion: Completion) -> None:
        echo: Echo = completion.engine_state
        if echo.parked:
            echo.parked = False
            self.schedule(completion)

    async def aclose(self) -> None:
        self.closed = True
        for completion in list(self.serving):
            self.end(completion, "cancelled")
