"""multi_user_chat: several users chat with one model at once; each conversation's turns are
answered one after another, in order, while the conversations run in parallel.

    rxpipe run pipelines/multi_user_chat.py                          # 4 users, 3 turns each
    rxpipe run pipelines/multi_user_chat.py --set users=8 --set tokens_per_s=2000

The graph, with demand flowing right to left::

    users (join at run time) ─> merge_hub(per_producer_buffer) ─> throttle(tokens_per_s, burst,
        cost=the turn's tokens) ─> map_async_partitioned(chat_turn, parallelism, partition=user)

- ``merge_hub``: a user joins while the pipeline runs (here every ``join_every_s``; in a server,
  when a connection opens) and attaches their conversation to the hub. Each user has
  ``per_producer_buffer`` turns of credit: a user typing ahead waits for their own credit and
  never crowds out the others.
- ``throttle(cost=...)``: the model's budget is tokens, not requests: a turn costs its new prompt
  tokens plus the tokens it may generate, paid from a bucket of ``burst`` tokens refilled at
  ``tokens_per_s``. Only one turn waits in front of the bucket; the rest wait at the hub.
- ``map_async_partitioned``: at most ``parallelism`` turns in flight, one per user, so turn ``n``
  is sent with the history that holds the answer to turn ``n - 1``.

The model is rxpipe's ``SimulatedEngine`` (vLLM-like continuous batching on the loop clock);
each answer is seeded by its prompt, so the lines printed are the same on every run (their order
across users follows the clock).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.engines import CompletionRequest, SimulatedEngine, estimate_tokens
from rxpipe.settings import Schema, Setting

NAMES = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "niaj")
QUESTIONS = ("what is backpressure", "and how does demand travel upstream", "why does that matter for a GPU",
             "what happens when a client is slow", "can one conversation starve the others")

#: ``--set key=value``; ``rxpipe run pipelines/multi_user_chat.py --help-settings``
SETTINGS = Schema(
    Setting("users", 4, "int", "users joining the chat", minimum=1, maximum=len(NAMES)),
    Setting("turns", 3, "int", "messages each user sends", minimum=1, maximum=len(QUESTIONS)),
    Setting("join_every_s", 0.2, "number", "a user joins this long after the one before (s)", minimum=0),
    Setting("think_s", 0.05, "number", "a user sends their next message this long after the last (s)", minimum=0),
    Setting("max_tokens", 24, "int", "tokens the model generates per answer", minimum=1),
    Setting("tokens_per_s", 800.0, "number", "the model's token budget: throttle's refill rate (tokens/s)",
            minimum=0, exclusive_minimum=True),
    Setting("burst", 200, "int", "the token budget's bucket (tokens)", minimum=1),
    Setting("per_producer_buffer", 2, "int", "messages a user may have waiting at the hub", minimum=1),
    Setting("parallelism", 4, "int", "turns in flight at once (one per user), and engine slots", minimum=1),
)


@dataclass(frozen=True)
class Turn:
    """One message of one user: ``n`` counts from 1; ``tokens`` is what it costs the budget."""

    user: str
    n: int
    text: str
    max_tokens: int

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text) + self.max_tokens


@dataclass(frozen=True)
class Answer:
    """The model's answer to a turn, with the size of the conversation it was given."""

    turn: Turn
    prompt_tokens: int
    completion_tokens: int
    text: str

    def __str__(self) -> str:
        return (f"{self.turn.user:<7} turn {self.turn.n}: {self.prompt_tokens:3} prompt tokens, "
                f"{self.completion_tokens} generated:{self.text[:48]}")


class Chat:
    """One run of the chat: the engine and each user's history (their messages and the answers)."""

    def __init__(self, engine: SimulatedEngine) -> None:
        self.engine = engine
        self.history: dict[str, list[dict[str, str]]] = {}

    async def turn(self, turn: Turn) -> Answer:
        """Send ``turn`` with its user's history; keep the answer in the history."""
        messages = [*self.history.get(turn.user, []), {"role": "user", "content": turn.text}]
        request = CompletionRequest(messages=messages, max_tokens=turn.max_tokens, id=f"{turn.user}-{turn.n}",
                                    sampling={"seed": turn.n})
        result = await self.engine.submit(request).result
        self.history[turn.user] = [*messages, {"role": "assistant", "content": result.text}]
        return Answer(turn, result.prompt_tokens, result.completion_tokens, result.text)


def conversation(k: int, turns: int, think_s: float, max_tokens: int) -> rx.Flowable:
    """User ``k``'s messages (the questions from the ``k``-th on), one every ``think_s`` seconds
    (each timer starts once the message before was taken: a user waiting for credit loses none)."""
    messages = [Turn(NAMES[k], n, QUESTIONS[(k + n - 1) % len(QUESTIONS)], max_tokens) for n in range(1, turns + 1)]
    return rx.from_iterable(messages).pipe(
        ops.concat_map(lambda turn: rx.timer(think_s).pipe(ops.map(lambda _: turn))))


def pipeline(config: dict[str, Any]) -> rx.Flowable:
    s = SETTINGS.resolve(config)
    engine = SimulatedEngine(max_num_seqs=s["parallelism"], stall_timeout_s=None)

    def run() -> rx.Flowable:
        # one chat per subscription: users join on the loop clock, the last to join drains the hub
        hub = ops.merge_hub(s["per_producer_buffer"], name="users")
        loop = asyncio.get_running_loop()
        names = NAMES[:s["users"]]

        joined: list[int] = []

        def join(k: int) -> None:
            hub.attach(conversation(k, s["turns"], s["think_s"], s["max_tokens"]))
            joined.append(k)
            # The join that makes the count drains, not the one scheduled last: a busy loop runs
            # every due join in one turn, and uvloop runs call_later(0) after the due timers.
            if len(joined) == len(names):
                hub.drain_and_complete()  # no one else comes: complete once everyone is done

        for k in range(len(names)):
            loop.call_later(k * s["join_every_s"], join, k)
        chat = Chat(engine)
        return hub.pipe(
            ops.throttle(s["tokens_per_s"], s["burst"], cost=lambda turn: turn.tokens, name="token_budget"),
            ops.map_async_partitioned(chat.turn, s["parallelism"], lambda turn: turn.user, ordered=False,
                                      name="chat"),
        )

    return rx.defer(run, name="chat")
