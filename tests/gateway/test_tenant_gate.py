"""The edge's per-tenant admission, against a real ``fair_queue``: room, quota, reconcile, reload."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from rxpipe import operators as ops
from rxpipe.gateway._tenant_gate import TenantGate, vtc_cost
from rxpipe.gateway._tenants import Tenants
from rxpipe.serving import AdmissionQueue
from rxpipe.testing import TestPublisher, TestSubscriber


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Item:
    def __init__(self, tenant: str, prompt_tokens: int, max_tokens: int) -> None:
        self.tenant = tenant
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens


def queue_of(tenants: Tenants, capacity: int) -> tuple[TestPublisher[Item], TestSubscriber[Item], Any]:
    pub = TestPublisher[Item]()
    ts = TestSubscriber[Item]()
    pub.pipe(ops.fair_queue(capacity, tenant=lambda r: r.tenant, weight=tenants.weights,
                            cost=lambda r: vtc_cost(r.prompt_tokens, r.max_tokens))).subscribe(ts)
    return pub, ts, ts.subscription.upstream  # type: ignore[union-attr]


DOC = {"quiet": {"keys": ["sk-q"], "tpm": 1000}, "noisy": {"keys": ["sk-n"]}}


def test_vtc_cost_is_input_plus_twice_output() -> None:
    assert vtc_cost(100, 50) == 200


def test_room_first_then_quota_and_a_queue_refusal_reserves_nothing() -> None:
    tenants = Tenants.from_mapping(DOC)  # + default: shares 1 + 1 + 1 of capacity 3
    pub, ts, queue = queue_of(tenants, 3)
    gate = TenantGate(tenants, Clock(), auth=True)
    assert gate.resolve(key="sk-n").name == "noisy"
    first = gate.check("noisy", 10, 10, queue)
    assert (first.allowed, first.reason, first.headers) == (True, None, {})
    pub.emit(Item("noisy", 10, 10))
    refused = gate.check("noisy", 10, 10, queue)
    assert (refused.allowed, refused.reason, refused.retry_after_s) == (False, "queue_full", None)
    quiet = gate.check("quiet", 400, 100, queue)
    assert quiet.allowed and quiet.headers["x-ratelimit-remaining-tokens"] == "500"
    pub.emit(Item("quiet", 400, 100))
    ts.request(2)  # both dispatched: room again for each
    limited = gate.check("quiet", 400, 101, queue)
    assert (limited.allowed, limited.reason, limited.retry_after_s) == (False, "rate_limited", 0.06)
    assert limited.headers == {"x-ratelimit-limit-tokens": "1000", "x-ratelimit-remaining-tokens": "500",
                               "x-ratelimit-reset-tokens": "30s"}
    full = gate.check("quiet", 1, 1, _NoDemand())
    assert full.reason == "queue_full" and full.headers["x-ratelimit-remaining-tokens"] == "500"


class _PlainDemand(AdmissionQueue):
    """An admission queue without shares: room for anyone while there is demand."""

    def __init__(self, requested: int) -> None:
        self.requested = requested

    def room_for(self, tenant: object) -> bool:
        return self.requested > 0

    def demand_for(self, tenant: object) -> int:
        return self.requested


def _NoDemand() -> _PlainDemand:
    return _PlainDemand(0)


def test_the_gate_asks_the_admission_queue_it_is_given() -> None:
    gate = TenantGate(Tenants.from_mapping(DOC), Clock(), auth=False)
    assert gate.check("default", 1, 1, _PlainDemand(1)).allowed
    assert not gate.check("default", 1, 1, _NoDemand()).allowed


def test_cancel_gives_the_reservation_back_and_finish_reconciles_quota_and_vtc() -> None:
    tenants = Tenants.from_mapping(DOC)
    pub, ts, queue = queue_of(tenants, 6)
    gate = TenantGate(tenants, Clock(), auth=True)
    gone = gate.check("quiet", 100, 300, queue)
    gate.cancel(gone)
    assert gate.quotas.headers("quiet")["x-ratelimit-remaining-tokens"] == "1000"
    decision = gate.check("quiet", 100, 300, queue)
    item = Item("quiet", 100, 300)
    pub.emit(item)
    ts.request(1)
    assert queue.virtual_token_counters() == {"quiet": 700.0}  # 100 + 2 x 300 charged at dispatch
    gate.started(decision, 0.25)
    gate.finish(decision, 100, 20, queue, item)
    assert queue.virtual_token_counters() == {"quiet": 140.0}  # reconciled to 100 + 2 x 20
    assert gate.quotas.headers("quiet")["x-ratelimit-remaining-tokens"] == "880"


def test_reload_applies_a_good_file_and_keeps_the_old_one_on_error(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "tenants.json"
    path.write_text(json.dumps(DOC))
    tenants = Tenants.load(path)
    _, _, queue = queue_of(tenants, 6)
    gate = TenantGate(tenants, Clock(), auth=True)
    assert queue.shares == {"quiet": 2, "noisy": 2, "default": 2}
    path.write_text(json.dumps({"quiet": {"keys": ["sk-q"], "weight": 4}, "noisy": {"keys": ["sk-n"]}}))
    assert gate.reload(queue) is None
    assert queue.shares == {"quiet": 4, "noisy": 1, "default": 1}
    assert gate.quotas.headers("quiet") == {}  # tpm removed
    path.write_text("{broken")
    with caplog.at_level(logging.ERROR, logger="rxpipe.gateway"):
        error = gate.reload(queue)
    assert error is not None and "not valid JSON" in str(error)
    assert gate.tenants["quiet"].weight == 4.0 and queue.shares == {"quiet": 4, "noisy": 1, "default": 1}
    assert "previous one stays in force" in caplog.text
