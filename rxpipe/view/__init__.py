"""``rxpipe.view``: see the pressure — the live pipeline view (DESIGN §7).

- :class:`PipelineView`: snapshots of a running pipeline (``GET /pipeline.json``'s body): per
  stage busy / backpressured / idle ms per second from demand, items per second, demand,
  requested, held; the bottleneck by Flink's rule; engines' slots; tenants' counters.
- :func:`add_view_routes` / :class:`StatusServer`: ``GET /pipeline.json``, ``GET /pipeline/events``
  (SSE, one snapshot a second) and ``GET /pipeline`` (a self-contained page) on the gateway's port
  or on ``rxpipe run FILE --status-port P``.
- :func:`shape` and the renderers (``text``, ``mermaid``, ``dot``, ``svg``): ``rxpipe graph``.

This layer sits on the core only: engines and tenants are read duck-typed from the stages.
"""

from __future__ import annotations

from ._http import MAX_STREAMS, PATHS, StatusServer, ViewRoutes
from ._render import dot, mermaid, svg, text
from ._shape import Node, engines_of, shape
from ._snapshot import BACKPRESSURED_MS, BUSY_MS, WINDOW_S, PipelineView, bottleneck

__all__ = ["PipelineView", "bottleneck", "ViewRoutes", "StatusServer", "PATHS", "MAX_STREAMS", "Node", "shape",
           "engines_of", "text", "mermaid", "dot", "svg", "WINDOW_S", "BACKPRESSURED_MS", "BUSY_MS"]
