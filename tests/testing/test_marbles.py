"""Marble tests with demand marks (DESIGN §9): the language, the runner, and map/take in marbles."""

from __future__ import annotations

import asyncio

import pytest

import rxpipe as rx
from rxpipe import UNBOUNDED, MissingBackpressureError
from rxpipe import operators as ops
from rxpipe.testing import (
    MarbleError,
    MarbleEvent,
    Marbles,
    TestSubscriber,
    assert_marbles,
    marbles,
    parse_demand,
    parse_marbles,
)
from rxpipe.testing._marbles import render_marbles


# the language -----------------------------------------------------------------------------------
def test_parse_items_each_column_a_frame_and_a_group_one_frame() -> None:
    assert parse_marbles("-a-(bc)-|") == [
        MarbleEvent(1, "next", "a"), MarbleEvent(3, "next", "b"), MarbleEvent(3, "next", "c"),
        MarbleEvent(5, "complete"),
    ]


def test_parse_values_digits_and_error() -> None:
    boom = KeyError("x")
    assert parse_marbles("1x #", values={"x": [1, 2]}, error=boom) == [
        MarbleEvent(0, "next", 1), MarbleEvent(1, "next", [1, 2]), MarbleEvent(3, "error", boom),
    ]


@pytest.mark.parametrize("diagram, problem", [
    ("-a-|b", "follows a terminal"),
    ("((a))", "nested group"),
    ("-a)", "without"),
    ("-(a", "unclosed"),
    ("-()", "empty group"),
    ("(a-b)", "inside a group"),
    ("-^1", "demand marks"),
])
def test_parse_rejects_malformed_item_diagrams(diagram: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_marbles(diagram)


def test_parse_demand_marks_stand_in_the_column_of_the_caret() -> None:
    assert parse_demand("^1---^12 ^*-!") == [(0, 1), (5, 12), (9, UNBOUNDED), (12, None)]
    assert parse_demand("^0") == [(0, 0)]


@pytest.mark.parametrize("diagram", ["^", "^-1", "-a-", "^2|"])
def test_parse_demand_rejects_what_is_not_demand(diagram: str) -> None:
    with pytest.raises(ValueError):
        parse_demand(diagram)


@pytest.mark.parametrize("diagram", ["-a-(bc)-|", "(ab|)", "--1-#", "a-b"])
def test_render_is_the_inverse_of_parse(diagram: str) -> None:
    assert render_marbles(parse_marbles(diagram)) == diagram


def test_render_uses_the_values_mapping_and_marks_unknown_values() -> None:
    events = [MarbleEvent(0, "next", [1, 2]), MarbleEvent(1, "next", 42), MarbleEvent(2, "complete")]
    assert render_marbles(events, {"x": [1, 2]}) == "x?|"


# map --------------------------------------------------------------------------------------------
def test_map_marbles_read_like_its_docstring() -> None:
    assert_marbles(ops.map(lambda x: x * 2), """
        source:  -1-2-3-|
        output:  -2-4-6-|
    """, upstream_requests=[(0, UNBOUNDED)], upstream_cancelled=None)


def test_map_passes_demand_through_and_the_output_follows_it() -> None:
    result = assert_marbles(
        ops.map(str.upper),
        source="-a-b-c-|",
        demand="^1---^2",
        expected="-A---(BC)-|",  # b waits for demand; b and c go out in the frame of ^2
        upstream_requests=[(0, 1), (5, 2)],
    )
    assert result.values == ["A", "B", "C"] and result.completed


def test_map_with_a_values_mapping() -> None:
    assert_marbles(ops.map(lambda r: {"id": r["id"], "ok": True}), """
        source:  -a--b|
        demand:  ^5
        output:  -A--B|
    """, values={"a": {"id": 1}, "b": {"id": 2}, "A": {"id": 1, "ok": True}, "B": {"id": 2, "ok": True}})


def test_map_cancel_travels_upstream_in_its_frame() -> None:
    # within a frame the demand marks act first: the cancel in frame 3 comes before b
    assert_marbles(ops.map(str.upper), source="-a-b-c-|", demand="^*-!", expected="-A-------",
                   upstream_cancelled=3)


def test_map_error_from_upstream_passes_through() -> None:
    boom = RuntimeError("upstream failed")
    assert_marbles(ops.map(str.upper), source="-a-#", expected="-A-#", error=boom,
                   upstream_cancelled=None)


def test_map_raising_cancels_upstream_and_signals_the_original_exception() -> None:
    def fn(x: str) -> str:
        if x == "b":
            raise LookupError("no b")
        return x

    result = assert_marbles(ops.map(fn), source="-a-b-c-|", expected="-a-#",
                            expected_error=LookupError, upstream_cancelled=3)
    assert result.error is not None and result.error.args == ("no b",)


def test_map_over_a_hot_source_beyond_demand_is_a_missing_backpressure_error() -> None:
    assert_marbles(ops.map(str.upper), source="-a-b-c-|", demand="^1", expected="-A-#", hot=True,
                   expected_error=MissingBackpressureError, upstream_cancelled=3)



def test_map_completion_with_nothing_requested() -> None:
    assert_marbles(ops.map(str.upper), source="---|", demand="", expected="---|",
                   upstream_requests=[])


# take -------------------------------------------------------------------------------------------
def test_take_completes_with_the_nth_item_and_cancels_upstream_in_that_frame() -> None:
    assert_marbles(ops.take(2), """
        source:  -a-b-c-|
        demand:  ^5
        output:  -a-(b|)
    """, upstream_requests=[(0, 2)], upstream_cancelled=3)


def test_take_never_requests_more_than_it_may_deliver() -> None:
    assert_marbles(ops.take(3), """
        source:  -a-b-c-d-|
        demand:  ^1-^5
        output:  -a-b-(c|)
    """, upstream_requests=[(0, 1), (3, 2)], upstream_cancelled=5)


def test_take_with_demand_shaping_the_output() -> None:
    assert_marbles(ops.take(3), source="(abcd)|", demand="^1--^1--^1", expected="a---b---(c|)",
                   upstream_requests=[(0, 1), (4, 1), (8, 1)], upstream_cancelled=8)


def test_take_passes_an_early_completion_with_partial_output() -> None:
    assert_marbles(ops.take(5), source="-a-|", expected="-a-|", upstream_requests=[(0, 5)],
                   upstream_cancelled=None)


def test_take_passes_an_early_error() -> None:
    assert_marbles(ops.take(5), source="-a-#", expected="-a-#", upstream_cancelled=None)


def test_take_zero_completes_at_once_without_subscribing_upstream() -> None:
    result = assert_marbles(ops.take(0), source="-a-b-|", expected="|", upstream_requests=[])
    assert result.source is not None and result.source.subscribe_count == 0


def test_take_cancelled_downstream_cancels_upstream() -> None:
    assert_marbles(ops.take(3), source="-a-b-c-|", demand="^*-!", expected="-a--", upstream_cancelled=3)


# the runner -------------------------------------------------------------------------------------
def test_a_mismatch_draws_both_diagrams() -> None:
    with pytest.raises(AssertionError) as failure:
        assert_marbles(ops.take(2), source="-a-b-c-|", expected="-a-b|", upstream_requests=[(0, 9)])
    message = str(failure.value)
    assert "expected: -a-b|\n  actual:   -a-(b|)" in message
    assert "[1:'a', 3:'b', 3:|]" in message
    assert "expected: [(0, 9)]\n  actual:   [(0, 2)]" in message


def test_cold_sources_hold_items_until_demand_and_complete_after_them() -> None:
    assert_marbles(None, source="(abc)|", demand="--^2-^1", expected="--(ab)--(c|)")


def test_a_source_error_waits_behind_its_items_and_default_error_matches() -> None:
    result = assert_marbles(None, source="ab#", demand="---^2", expected="---(ab#)")
    assert isinstance(result.error, MarbleError)


def test_an_invalid_request_in_the_demand_diagram_is_the_spec_error() -> None:
    result = assert_marbles(None, source="-a-|", demand="^0", expected="#", expected_error=ValueError)
    assert "§3.9" in str(result.error)


def test_a_stream_left_open_is_cancelled_after_the_window_but_not_counted() -> None:
    result = assert_marbles(ops.map(str.upper), source="-a---", expected="-A---",
                            upstream_cancelled=None)
    assert result.source is not None and result.source.cancelled  # the clean-up cancel happened


def test_the_runner_keeps_observing_while_timers_are_pending() -> None:
    async def main() -> str:
        m = Marbles(frame_s=0.1, max_frames=12)
        result = await m.run(rx.interval(0.5), demand="^*")
        return result.output

    output = rx_run(main())
    assert output == "-----0----1--"  # never settles: cut at max_frames (frame 12)


def test_a_run_ends_when_nothing_is_pending_unless_frames_asks_for_more() -> None:
    assert assert_marbles(None, source="-a").output == "-a-"
    assert assert_marbles(None, source="-a", frames=6).output == "-a-----"


def test_marbles_refuse_a_real_loop() -> None:
    async def main() -> None:
        await marbles(ops.take(1), "-a|")

    with pytest.raises(RuntimeError, match="virtual time"):
        asyncio.run(main())


async def test_assert_marbles_inside_a_running_loop_points_to_marbles() -> None:
    with pytest.raises(RuntimeError, match="await marbles"):
        assert_marbles(ops.take(1), "-a|")


@pytest.mark.virtual
async def test_marbles_in_a_virtual_async_test(loop: asyncio.AbstractEventLoop) -> None:
    result = await marbles(ops.take(2), "-a-b-c-|", "^5")
    result.expect("-a-(b|)", upstream_requests=[(0, 2)], upstream_cancelled=3)
    assert loop.time() == pytest.approx(0.03)


@pytest.mark.virtual
async def test_several_sources_share_one_clock(loop: asyncio.AbstractEventLoop) -> None:
    m = Marbles()
    first, second = m.cold("-a-|"), m.hot("--x--y|")
    result = await m.run(rx.defer(lambda: first if loop.time() < 1 else second).pipe(ops.map(str.upper)),
                         demand="^*")
    result.expect("-A-|")
    assert first.subscribed_at == [0] and second.subscribed_at == []
    assert first.request_log == [(0, UNBOUNDED)]


@pytest.mark.virtual
async def test_a_hot_source_plays_from_frame_zero_and_replays_its_end_to_late_subscribers() -> None:
    m = Marbles()
    hot = m.hot("-a-|")
    result = await m.run(hot, demand="^*")
    result.expect("-a-|")
    await asyncio.sleep(0.05)  # frame 8: the diagram ended in frame 3
    late = TestSubscriber[str]()
    hot.subscribe(late)
    assert late.completed and late.values == []


def test_block_rejects_unknown_labels_and_doubles() -> None:
    with pytest.raises(ValueError, match="unknown marble label"):
        assert_marbles(None, "source: -a|\nresult: -a|")
    with pytest.raises(ValueError, match="twice"):
        assert_marbles(None, "source: -a|\nhot:    -a|")


# helpers ----------------------------------------------------------------------------------------
def rx_run(coro):  # type: ignore[no-untyped-def]
    from rxpipe.testing import run_virtual

    return run_virtual(coro)
