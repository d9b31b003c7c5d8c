"""The HTTP edge: an OpenAI-compatible gateway whose admission is the graph's demand (DESIGN §5).

    from rxpipe.gateway import Gateway, edge_queue
    pipeline = Pipeline(Gateway(model="sim"), edge_queue(100), ops.execute(engine))
"""

from ..serving import EdgeQueueFlowable, ReplyFuture, edge_queue, reply_departure
from ._config import EDGE_SETTINGS, QUEUE_CAPACITY, GatewayConfig, gateway_config, parse_api_keys
from ._gateway import Gateway
from ._tenant_gate import vtc_cost
from ._tenants import Tenant, Tenants, TenantsFileError

__all__ = ["Gateway", "GatewayConfig", "EDGE_SETTINGS", "QUEUE_CAPACITY", "gateway_config", "EdgeQueueFlowable",
           "ReplyFuture", "Tenant", "Tenants", "TenantsFileError", "edge_queue", "parse_api_keys", "reply_departure",
           "vtc_cost"]
