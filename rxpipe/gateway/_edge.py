"""What the HTTP layer asks of the edge it serves: the declared interface between the handlers
(``_routes``, ``_completions``, ``_sse``) and :class:`~rxpipe.gateway.Gateway`, so neither
module imports the other."""

from __future__ import annotations

from typing import Protocol

from ..errors import UnsupportedRequestError
from ..serving import Completion, CompletionRequest
from ..view import PipelineView
from ._admission import AdmissionPolicy
from ._config import GatewayConfig
from ._credit import Credit
from ._credit_watch import CreditWatch
from ._keys import KeyRing
from ._policy import Refusal
from ._tenancy import Tenancy

__all__ = ["Edge"]


class Edge(Protocol):
    """The admission side of an edge, as its HTTP handlers see it.

    Attributes: ``config``; ``keys`` (who is calling); ``tenancy`` (None with one tenant);
    ``policy`` (refusals, Retry-After, the drain meter); ``access_log`` (one line per answer);
    ``view`` (the live pipeline view, once the edge is attached to its pipeline);
    ``credit_watch`` (the routers watching its credit, ``GET /v1/credit`` as an event stream).
    """

    config: GatewayConfig
    keys: KeyRing
    tenancy: Tenancy | None
    policy: AdmissionPolicy
    access_log: bool
    view: PipelineView | None
    credit_watch: CreditWatch

    @property
    def draining(self) -> bool:
        """True once the edge stopped taking work (503 ``draining``)."""

    @property
    def available(self) -> bool:
        """False when the graph stopped or an engine is down (503 ``unavailable``)."""

    def loop_time(self) -> float:
        """The serving loop's clock (seconds)."""

    def credit(self, now: float) -> Credit:
        """The edge's credit at loop time ``now`` (what every answer's head carries)."""

    def early_refusal(self, now: float) -> Refusal | None:
        """The refusal a request gets before its body is read (draining, unavailable, no demand)."""

    def unsupported(self, request: CompletionRequest) -> UnsupportedRequestError | None:
        """The refusal of a request asking for a feature its engines do not declare, or None."""

    def admit(self, request: CompletionRequest, now: float) -> Refusal | None:
        """Emit ``request`` into the graph, or the refusal."""

    def started(self, request: CompletionRequest, completion: Completion, now: float) -> None:
        """The engine took ``request`` at loop time ``now``."""

    def leave(self, request: CompletionRequest) -> None:
        """The answer to an admitted ``request`` is over (any outcome)."""

    def reject(self, refusal: Refusal) -> None:
        """Count ``refusal`` in the edge's metrics."""
