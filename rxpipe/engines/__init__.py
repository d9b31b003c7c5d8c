"""Inference engines: the backends behind the executor stage (DESIGN §4).

    from rxpipe.engines import CompletionRequest, SimulatedEngine
    from rxpipe import operators as ops

    engine = SimulatedEngine(max_num_seqs=8)
    completions = requests.pipe(ops.execute(engine))    # a Flowable of Completion

- Records and the engine interface live in :mod:`rxpipe.serving` and are re-exported here (the
  same objects): :class:`CompletionRequest`, :class:`TokenChunk`, :class:`Completion` (``.tokens``
  with credit, awaitable ``.result``), :class:`CompletionResult`; :class:`Engine`, the interface
  ``execute`` drives (``free_slots`` is the pipeline's demand) and the base of a user's engine:
  ``submit`` is written once there; an engine implements ``start`` and the hooks
  ``cancel_completion``, ``credit_granted`` (the manual's "Write your own engine", docs/tutorials/engine.md).
- :class:`SimulatedEngine`: the embedded default, continuous batching like vLLM, on the loop clock.
- :class:`OpenAIEngine`: a real OpenAI-compatible server (vLLM, TGI, llama.cpp) over HTTP/SSE.
- :class:`BatchFunctionEngine`: a local synchronous batch function (a model) in worker threads.
- :func:`execute`: the executor stage (``rxpipe.serving.execute``, also ``rxpipe.operators.execute``).
"""

from ..errors import BackendError, EngineError, EngineUnavailableError
from ..serving.engine import Engine
from ..serving.records import (
    FINISH_REASONS,
    UNANSWERED_REASONS,
    Completion,
    CompletionRequest,
    CompletionResult,
    TokenChunk,
    estimate_tokens,
)
from ._settings import OPENAI_SETTINGS, SIMULATED_PIPELINE, SIMULATED_SETTINGS
from .batch_function import BatchFunctionEngine, BatchRecord, request_text
from .executor import ExecuteFlowable, execute
from .openai import OpenAIEngine, parse_retry_after
from .simulated import LatencyModel, SimulatedEngine, StepRecord

__all__ = [
    "CompletionRequest",
    "TokenChunk",
    "CompletionResult",
    "Completion",
    "FINISH_REASONS",
    "UNANSWERED_REASONS",
    "estimate_tokens",
    "Engine",
    "SimulatedEngine",
    "StepRecord",
    "LatencyModel",
    "OpenAIEngine",
    "parse_retry_after",
    "BatchFunctionEngine",
    "BatchRecord",
    "request_text",
    "execute",
    "ExecuteFlowable",
    "EngineError",
    "EngineUnavailableError",
    "BackendError",
    "SIMULATED_SETTINGS",
    "SIMULATED_PIPELINE",
    "OPENAI_SETTINGS",
]
