"""The HTTP edge: an OpenAI-compatible gateway whose admission is the graph's demand (DESIGN §5).

    from rxpipe.gateway import Gateway
    pipeline = Pipeline(Gateway(model="sim"), ops.buffer(100), ops.execute(engine))
"""

from ._config import GatewayConfig, parse_api_keys
from ._gateway import Gateway

__all__ = ["Gateway", "GatewayConfig", "parse_api_keys"]
