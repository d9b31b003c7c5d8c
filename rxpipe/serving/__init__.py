"""The LLM serving domain on the core: records, the engine interface, and the serving stages.

    from rxpipe.serving import CompletionRequest, execute, fair_queue
    from rxpipe.engines import SimulatedEngine

    completions = requests.pipe(fair_queue(64, tenant=lambda r: r.tenant), execute(SimulatedEngine()))

What lives here (DESIGN §1, "Layout, second round"): everything about serving completions that
is neither an HTTP server, nor a broker, nor a backend:

- records: :class:`CompletionRequest`, :class:`TokenChunk` (:class:`DeltaChunk` when it carries
  more than text), :class:`Completion` (``.tokens``
  with credit, awaitable ``.result``), :class:`CompletionResult`, :data:`FINISH_REASONS`,
  :func:`estimate_tokens` (:data:`PART_TOKENS` per content part that is not text);
- :class:`Engine`: the interface the executor drives (``free_slots`` is the pipeline's demand)
  and the base of every backend (:mod:`rxpipe.engines`); what an engine serves beyond text
  (``Engine.features``, names of :data:`FEATURES`, or :data:`ALL_FEATURES`);
- the serving stages: :func:`execute` (the executor, where backpressure is born),
  :func:`edge_queue` and :func:`fair_queue` (the queues behind an edge, the latter answering
  the :class:`AdmissionQueue` protocol per tenant), :func:`balance` with
  :func:`prefix_affinity` (replicas), :func:`cache` (exact-match responses, single-flight);
- the request-outcome metric (``rxpipe_requests_finished_total{outcome}``: :func:`count_finished`,
  :func:`outcome_of`), counted by gateways and workers alike.

It imports the core, ``rxpipe.stage`` and ``rxpipe.operators`` only. The stages are also
``rxpipe.operators.execute`` … ``rxpipe.operators.cache``, and the records and ``Engine`` also
``rxpipe.engines.*``: the same objects.
"""

from ._admission import AdmissionQueue
from ._affinity import PrefixAffinity, RoutingPolicy
from ._balance import Replicas
from ._edge_queue import EdgeQueueFlowable, ReplyFuture, edge_queue, reply_departure
from ._execute import ExecuteFlowable
from ._features import ALL_FEATURES, FEATURES
from ._operators import balance, cache, execute, fair_queue, prefix_affinity
from ._outcomes import OUTCOMES, count_finished, outcome_of
from .engine import Engine
from .records import (
    FINISH_REASONS,
    PART_TOKENS,
    UNANSWERED_REASONS,
    Completion,
    CompletionRequest,
    CompletionResult,
    DeltaChunk,
    TokenChunk,
    estimate_tokens,
)

__all__ = [
    "CompletionRequest",
    "TokenChunk",
    "DeltaChunk",
    "CompletionResult",
    "Completion",
    "FINISH_REASONS",
    "UNANSWERED_REASONS",
    "estimate_tokens",
    "PART_TOKENS",
    "Engine",
    "FEATURES",
    "ALL_FEATURES",
    "execute",
    "ExecuteFlowable",
    "edge_queue",
    "EdgeQueueFlowable",
    "ReplyFuture",
    "reply_departure",
    "fair_queue",
    "AdmissionQueue",
    "balance",
    "Replicas",
    "prefix_affinity",
    "PrefixAffinity",
    "RoutingPolicy",
    "cache",
    "OUTCOMES",
    "count_finished",
    "outcome_of",
]
