"""``edge_queue``: one more per departure, the exact bound, skipping requests whose client left."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import rxpipe as rx
from rxpipe.engines import CompletionRequest
from rxpipe.gateway import ReplyFuture, edge_queue
from rxpipe.testing import TestPublisher, TestSubscriber


def request(name: str) -> CompletionRequest:
    return CompletionRequest(prompt=name, reply=ReplyFuture(loop=asyncio.get_running_loop()))


def wire(capacity: int, initial: int = 0) -> tuple[TestPublisher[Any], TestSubscriber[Any]]:
    source: TestPublisher[Any] = TestPublisher()
    sink: TestSubscriber[Any] = TestSubscriber(initial_request=initial)
    source.pipe(edge_queue(capacity)).subscribe(sink)
    return source, sink


@pytest.mark.virtual
async def test_requests_capacity_then_one_per_departure_not_per_delivery() -> None:
    source, sink = wire(3)
    assert source.requests == [3]
    a, b, c = request("a"), request("b"), request("c")
    source.emit(a, b, c)
    sink.request(2)
    assert sink.values == [a, b] and source.requests == [3]  # delivered is not departed
    assert a.reply is not None
    a.reply.set_result("started")  # the executor admitted it to the engine
    assert source.requests == [3, 1]  # at once, not one loop iteration later
    b.reply.set_exception(RuntimeError("failed"))  # type: ignore[union-attr]
    b.reply.exception()  # type: ignore[union-attr]
    assert source.requests == [3, 1, 1]


@pytest.mark.virtual
async def test_a_request_whose_client_left_while_queued_is_skipped_and_frees_its_place() -> None:
    source, sink = wire(2)
    a, b = request("a"), request("b")
    source.emit(a, b)
    a.cancel()  # the client went away: its reply is cancelled
    assert source.requests == [2, 1]
    sink.request(5)
    assert sink.values == [b]


@pytest.mark.virtual
async def test_items_without_a_reply_depart_when_delivered() -> None:
    source, sink = wire(2)
    source.emit("x", "y")
    assert source.requests == [2]
    sink.request(1)
    assert sink.values == ["x"] and source.requests == [2, 1]


@pytest.mark.virtual
async def test_emitting_beyond_demand_is_a_protocol_violation_and_cancels_upstream() -> None:
    source, sink = wire(1)
    a, b = request("a"), request("b")
    source.emit(a, b)
    assert isinstance(sink.error, rx.MissingBackpressureError) and source.cancelled
    assert source.requests == [1]  # nothing more after the failure
    for dropped in (a, b):  # both clients get an answer
        assert dropped.reply is not None and isinstance(dropped.reply.exception(), rx.DroppedError)


@pytest.mark.virtual
async def test_error_and_completion_come_after_the_queued_items_and_cancel_travels_up() -> None:
    source, sink = wire(2)
    a = request("a")
    source.emit(a).error(ValueError("boom"))
    assert sink.error is None
    sink.request(1)
    assert sink.values == [a] and isinstance(sink.error, ValueError)
    source2, sink2 = wire(2)
    source2.emit("x").complete()
    sink2.request(1)
    assert sink2.values == ["x"] and sink2.completed
    source3, sink3 = wire(2)
    sink3.cancel()
    assert source3.cancelled


def test_capacity_is_validated() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="edge_queue"):
            edge_queue(bad)  # type: ignore[arg-type]
