"""Per-tenant series: configured names only (others as ``other``), known reasons at 0 from the start."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from rxpipe.gateway._tenant_metrics import TenantMetrics
from rxpipe.gateway._tenants import Tenants


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_series_exist_at_zero_and_count_by_configured_name_or_other() -> None:
    tenants = Tenants.from_mapping({"tm_acme": {}, "tm_beta": {}})
    before_other = value("rxpipe_tenant_admitted_total", tenant="other") or 0.0
    metrics = TenantMetrics(tenants)
    assert value("rxpipe_tenant_admitted_total", tenant="tm_acme") == 0.0
    assert value("rxpipe_tenant_refused_total", tenant="tm_beta", reason="rate_limited") == 0.0
    assert value("rxpipe_tenant_tokens_total", tenant="tm_acme", direction="out") == 0.0
    metrics.admitted("tm_acme")
    metrics.admitted("mallory-raw-input")
    metrics.refused("tm_beta", "queue_full")
    metrics.tokens("tm_acme", 12, 30)
    metrics.queue_wait("tm_acme", 0.2)
    assert value("rxpipe_tenant_admitted_total", tenant="tm_acme") == 1.0
    assert value("rxpipe_tenant_admitted_total", tenant="other") == before_other + 1.0
    assert value("rxpipe_tenant_admitted_total", tenant="mallory-raw-input") is None
    assert value("rxpipe_tenant_refused_total", tenant="tm_beta", reason="queue_full") == 1.0
    assert value("rxpipe_tenant_tokens_total", tenant="tm_acme", direction="in") == 12.0
    assert value("rxpipe_tenant_tokens_total", tenant="tm_acme", direction="out") == 30.0
    assert value("rxpipe_tenant_queue_wait_seconds_count", tenant="tm_acme") == 1.0
    assert value("rxpipe_tenant_queue_wait_seconds_bucket", tenant="tm_acme", le="0.25") == 1.0
    with pytest.raises(ValueError, match="unknown refusal reason 'teapot'"):
        metrics.refused("tm_acme", "teapot")


def test_reconfigure_adds_new_names_and_keeps_counting_old_children() -> None:
    metrics = TenantMetrics(["tm_one"])
    metrics.admitted("tm_one")
    metrics.reconfigure(["tm_one", "tm_two"])
    metrics.admitted("tm_one")
    metrics.admitted("tm_two")
    assert value("rxpipe_tenant_admitted_total", tenant="tm_one") == 2.0
    assert value("rxpipe_tenant_admitted_total", tenant="tm_two") == 1.0
