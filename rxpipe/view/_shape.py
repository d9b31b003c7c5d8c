"""The static shape of a pipeline's graph: its stages, upstream first, with their edges.

What ``rxpipe graph`` draws and what the live view lays out: every stage of the graph (fused
chains stage by stage), the branches of a stage that has them inside (``balance``: a port and
the stages behind it per replica, one level deeper), and every edge — broadcast and balance fan
out, zip and merge fan in, and a stage after a ``balance`` takes the branches' last stages as
its upstreams (where the replicas' outputs merge).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..logs import public_url
from ..runtime import Pipeline, walk

__all__ = ["Node", "shape", "engines_of"]


@dataclass(frozen=True, slots=True)
class Node:
    """One stage of the graph.

    ``name``: the stage name (unique in a graph; the ``stage`` label of metrics). ``kind``: the
    operator (``map``, ``execute``, ...). ``upstream``: the names of the stages feeding it, in
    order. ``depth``: 0, or 1 for a stage inside another's branches. ``fused``: part of a fused
    synchronous chain. ``detail``: what else a reader needs (an executor's engine and its URL,
    without credentials), or "".
    """

    name: str
    kind: str
    upstream: tuple[str, ...]
    depth: int = 0
    fused: bool = False
    detail: str = ""

    @property
    def label(self) -> str:
        """``kind``, then ``, fused`` and ``; detail`` when there are (``rxpipe graph``'s text)."""
        return self.kind + (", fused" if self.fused else "") + (f"; {self.detail}" if self.detail else "")


def _is_engine(engine: object) -> bool:
    """An engine as the executor sees it (duck-typed: this layer imports no serving code)."""
    return engine is not None and hasattr(engine, "free_slots") and hasattr(engine, "max_num_seqs")


def _detail(stage: Any) -> str:
    engine: Any = getattr(stage, "engine", None)
    if _is_engine(engine):
        where = getattr(engine, "base_url", None)
        return f"engine {engine.name}: {type(engine).__name__}{' at ' + public_url(where) if where else ''}"
    return ""


def shape(pipeline: Pipeline) -> list[Node]:
    """Every stage of ``pipeline``, upstream first (a stage after all of its upstreams, a
    branch's stages under the stage that owns them)."""
    from .._fusion import FusedFlowable

    rows: list[Node] = []
    #: a stage whose outputs are its branches' (balance): the names that stand for it downstream
    ends: dict[int, tuple[str, ...]] = {}
    last: dict[int, str] = {}  # a fused chain: its last stage's name stands for it

    def names(ups: Any) -> tuple[str, ...]:
        found: list[str] = []
        for up in ups:
            found.extend(ends.get(id(up), (last.get(id(up), up.name),)))
        return tuple(found)

    def add(stage: Any, ups: tuple[str, ...], depth: int) -> None:
        if isinstance(stage, FusedFlowable):
            for fused in stage.stages:
                rows.append(Node(fused.name, fused.kind, ups, depth, True))
                ups = (fused.name,)
            last[id(stage)] = ups[0]
            return
        rows.append(Node(stage.name, stage.kind, ups, depth, False, _detail(stage)))
        outputs = getattr(stage, "outputs", ())
        for port, output in zip(getattr(stage, "ports", ()), outputs, strict=False):
            add(port, (stage.name,), depth + 1)
            for inner in _between(port, output):
                add(inner, names(inner.upstreams), depth + 1)
        if outputs:
            ends[id(stage)] = names(outputs)

    for stage in walk(pipeline.flowable):
        add(stage, names(stage.upstreams), 0)
    return rows


def _between(port: Any, output: Any) -> list[Any]:
    """The stages of a branch from ``port`` (excluded) to ``output``, upstream first."""
    chain: list[Any] = []
    node = output
    while node is not port and node is not None:
        chain.append(node)
        node = node.upstreams[0] if node.upstreams else None
    return chain[::-1] if node is port else []


def engines_of(pipeline: Pipeline) -> list[Any]:
    """The engines behind ``pipeline``'s stages, each once, in graph order (a ``balance``'s
    replicas one by one): objects with ``name``, ``running``, ``waiting``, ``free_slots``."""
    found: list[Any] = []
    for stage in pipeline.stages:
        engine = getattr(stage, "engine", None)
        replicas = getattr(engine, "engines", None)
        for e in replicas if replicas is not None else [engine] if engine is not None else []:
            if _is_engine(e) and all(e is not f for f in found):
                found.append(e)
    return found
