"""pipelines/multi_user_chat.py: users joining at run time through merge_hub, a token budget
(throttle by cost), one turn per user at a time with its history (map_async_partitioned); on
virtual time, and through ``rxpipe run``."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rxpipe.engines import estimate_tokens
from rxpipe.testing import run_virtual

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = ROOT / "pipelines" / "multi_user_chat.py"


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("multi_user_chat_under_test", PIPELINE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


class Recorder:
    """Wraps Chat.turn: when each turn started and ended on the loop clock, and its messages."""

    def __init__(self, module: ModuleType) -> None:
        self.calls: list[tuple[float, float, Any, list[dict[str, str]]]] = []
        original = module.Chat.turn

        async def turn(chat: Any, item: Any) -> Any:
            loop = asyncio.get_running_loop()
            start = loop.time()
            history = list(chat.history.get(item.user, []))
            answer = await original(chat, item)
            self.calls.append((start, loop.time(), item, history))
            return answer

        module.Chat.turn = turn


def test_every_user_gets_every_answer_in_order_with_the_history_of_the_ones_before() -> None:
    module = load()
    recorder = Recorder(module)
    answers = run_virtual(module.pipeline({"users": 6, "turns": 4}).to_list())
    assert len(answers) == 24
    for user in module.NAMES[:6]:
        mine = [a for a in answers if a.turn.user == user]
        assert [a.turn.n for a in mine] == [1, 2, 3, 4]  # in order, each once
        history: list[dict[str, str]] = []
        for answer in mine:  # each turn was sent with every earlier question and answer
            history.append({"role": "user", "content": answer.turn.text})
            assert answer.prompt_tokens == estimate_tokens(None, history)
            history.append({"role": "assistant", "content": answer.text})
    for start, _, item, history in recorder.calls:  # one turn per user in flight, never two
        earlier = [c for c in recorder.calls if c[2].user == item.user and c[2].n < item.n]
        assert all(end <= start for _, end, _, _ in earlier) and len(history) == 2 * (item.n - 1)


def test_users_join_at_run_time_and_the_token_budget_holds() -> None:
    module = load()
    recorder = Recorder(module)
    config = {"users": 5, "turns": 3, "join_every_s": 0.5, "think_s": 0.0, "tokens_per_s": 100.0, "burst": 40,
              "max_tokens": 8}
    answers = run_virtual(module.pipeline(config).to_list())
    assert len(answers) == 15
    starts = sorted((start, item) for start, _, item, _ in recorder.calls)
    for k, user in enumerate(module.NAMES[:5]):  # nobody's turn before they joined
        assert min(start for start, item in starts if item.user == user) >= k * 0.5 - 1e-9
    spent = 0
    for start, item in starts:  # tokens sent by any time t never exceed burst + rate * t
        spent += item.tokens
        assert spent <= 40 + 100.0 * start + 1e-6
    total = sum(item.tokens for _, item in starts)
    assert starts[-1][0] >= (total - 40) / 100.0 - 1e-6  # the budget, not the model, set the pace


def test_a_user_typing_ahead_waits_for_their_own_credit() -> None:
    module = load()
    sent: dict[str, int] = {}
    original = module.conversation

    def counting(k: int, *args: Any) -> Any:
        user = module.NAMES[k]
        sent[user] = 0

        def note(turn: Any) -> None:
            sent[user] += 1

        from rxpipe import operators as ops

        return original(k, *args).pipe(ops.tap(note))

    module.conversation = counting

    async def main() -> None:
        stalled = module.pipeline({"users": 3, "turns": 5, "think_s": 0.0, "join_every_s": 0.0,
                                   "tokens_per_s": 1.0, "burst": 40, "per_producer_buffer": 2})
        task = asyncio.ensure_future(stalled.to_list())
        await asyncio.sleep(5.0)  # the budget pays one turn (~30 tokens); the next waits ~20 s for its cost
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    run_virtual(main())
    # each user handed over its credit (2 turns); the hub gave 2 turns to the budget (one paid, one
    # waiting for its cost), and those users got 1 turn of credit back each: 3 x 2 + 2, no more
    assert sum(sent.values()) == 3 * 2 + 2 and max(sent.values()) <= 3


@pytest.mark.loops("uvloop")
async def test_every_user_is_answered_whatever_order_the_loop_runs_the_joins_in() -> None:
    # A loop busy past every join's deadline runs the due joins in one turn, and uvloop runs a
    # call_later(0) (the first user's join) after the timers already due: the join scheduled
    # last is not the last to run. The blocking sleep only makes every deadline overdue, so
    # the order is the same however loaded the machine is.
    module = load()
    run = asyncio.ensure_future(module.pipeline({"users": 3, "turns": 2, "join_every_s": 0.001}).to_list())
    await asyncio.sleep(0)  # the pipeline subscribed: the joins are scheduled
    time.sleep(0.05)
    answers = await asyncio.wait_for(run, 60)
    for user in module.NAMES[:3]:
        assert [a.turn.n for a in answers if a.turn.user == user] == [1, 2]
    assert len(answers) == 6


def test_rxpipe_run_prints_one_line_per_answer(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "rxpipe", "run", "pipelines/multi_user_chat.py", "--set", "users=3",
                          "--set", "turns=2", "--set", "join_every_s=0.01"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 6
    for user in ("alice", "bob", "carol"):
        assert [line.split(":")[0] for line in lines if line.startswith(user)] == [
            f"{user:<7} turn 1", f"{user:<7} turn 2"]


def test_bad_settings_are_refused() -> None:
    module = load()
    with pytest.raises(ValueError, match="users"):
        module.pipeline({"users": 0})
    with pytest.raises(ValueError, match="unknown setting"):
        module.pipeline({"user": 3})
