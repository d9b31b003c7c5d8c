"""rxpipe operators: ``from rxpipe import operators as ops``.

Every operator is a factory returning ``Callable[[Flowable], Flowable]`` for ``flowable.pipe()``.
Each takes ``name=`` (the stage name in metrics and graphs; default ``<operator>_<index>``).

This module is a lazy facade (PEP 562): it maps each public name to the private module of its
family, and imports that module the first time one of its names is used, so ``import
rxpipe.operators`` loads no operator. Each family module is its manual: every factory's
docstring gives a marble diagram, the demand rule, the errors signalled, units and the
semantics' anchor; the implementations live in the modules beside them.

Marble legend: ``-`` time, letters items, ``|`` completion, ``#`` error, ``^n`` a ``request(n)``.
"""

from __future__ import annotations

# ruff: noqa: F401  (the TYPE_CHECKING imports are for type checkers; __all__ is computed)
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see; _FAMILIES below is what runs (a test keeps them equal)
    from rxpipe.resilience import CircuitBreaker, Retry
    from rxpipe.serving import balance, cache, execute, fair_queue, prefix_affinity

    from ._aggregating import count, last, reduce, to_list
    from ._combining import combine_latest, concat, merge, start_with, with_latest_from, zip
    from ._error_handling import catch, retry
    from ._filtering import distinct, distinct_until_changed, first, pairwise, skip_while, take_until, take_while
    from ._flattening import concat_map, flat_map, switch_map
    from ._flow_control import batch, buffer, limit_rate, map_async, rate_limit
    from ._group_by import GroupedFlowable

    # the operators for LLM pipelines beyond RxPY (DESIGN §3; Akka's semantics)
    from ._hubs import BroadcastHub, PartitionHub, broadcast_hub, partition_hub
    from ._merge_hub import HubProducer, MergeHub, merge_hub
    from ._multicasting import broadcast
    from ._partitioned import map_async_partitioned
    from ._prioritized import merge_prioritized
    from ._restart import KillSwitch, kill_switch, restart_with_backoff
    from ._shaping import conflate, keep_alive, throttle
    from ._split import Substream, split_when
    from ._timing import debounce, delay, sample, throttle_first, timeout
    from ._transforming import filter, map, scan, skip, take, tap
    from ._windowing import group_by

#: module -> the public names it defines, in the order of ``__all__``. A module name starting
#: with "." is a module of this package (a family's manual); the others are absolute: the
#: serving stages are rxpipe.serving's own objects, looked up by name so that importing the
#: generic vocabulary loads no LLM record (``ops.execute is rxpipe.serving.execute``).
_FAMILIES: dict[str, tuple[str, ...]] = {
    "._transforming": ("map", "filter", "scan", "take", "skip", "tap"),
    "._filtering": ("pairwise", "distinct", "distinct_until_changed", "take_while", "skip_while", "take_until",
                    "first"),
    "._aggregating": ("last", "reduce", "count", "to_list"),
    "._flow_control": ("buffer", "limit_rate", "batch", "rate_limit", "map_async"),
    "._windowing": ("group_by",),
    "._timing": ("timeout", "debounce", "sample", "throttle_first", "delay"),
    "._combining": ("merge", "zip", "combine_latest", "with_latest_from", "concat", "start_with"),
    "._flattening": ("flat_map", "concat_map", "switch_map"),
    "._error_handling": ("catch", "retry"),
    "._multicasting": ("broadcast",),
    # not operators: the policies of map_async, the type of group_by's groups
    "rxpipe.resilience": ("Retry", "CircuitBreaker"),
    "._group_by": ("GroupedFlowable",),
    "rxpipe.serving": ("execute", "fair_queue", "balance", "prefix_affinity", "cache"),
    # the operators for LLM pipelines beyond RxPY (DESIGN §3; Akka's semantics; docs/llm-operators.md),
    # with the handles and types they return
    "._shaping": ("throttle", "conflate", "keep_alive"),
    "._partitioned": ("map_async_partitioned",),
    "._restart": ("kill_switch", "KillSwitch", "restart_with_backoff"),
    "._split": ("split_when", "Substream"),
    "._prioritized": ("merge_prioritized",),
    "._merge_hub": ("merge_hub", "MergeHub", "HubProducer"),
    "._hubs": ("broadcast_hub", "BroadcastHub", "partition_hub", "PartitionHub"),
}

#: public name -> the module that defines it
_MODULE_OF: dict[str, str] = {name: module for module, names in _FAMILIES.items() for name in names}

__all__ = [name for names in _FAMILIES.values() for name in names]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__) if module[0] == "." else importlib.import_module(module),
                    name)
    globals()[name] = value  # once: later lookups are plain module attributes
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
