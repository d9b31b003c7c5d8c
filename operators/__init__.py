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

    from ._aggregating import (
        all,
        average,
        contains,
        count,
        find,
        find_index,
        fork_join,
        ignore_elements,
        is_empty,
        last,
        last_or_default,
        max,
        max_by,
        min,
        min_by,
        reduce,
        sequence_equal,
        single,
        single_or_default,
        some,
        sum,
        take_last,
        take_last_buffer,
        to_dict,
        to_future,
        to_list,
        to_set,
    )
    from ._combining import (
        amb,
        combine_latest,
        concat,
        join,
        merge,
        start_with,
        with_latest_from,
        zip,
        zip_latest,
        zip_with_iterable,
        zip_with_list,
    )
    from ._error_handling import catch, on_error_resume_next, retry
    from ._filtering import (
        default_if_empty,
        distinct,
        distinct_until_changed,
        element_at,
        element_at_or_default,
        filter_indexed,
        first,
        first_or_default,
        pairwise,
        skip_last,
        skip_until,
        skip_while,
        skip_while_indexed,
        slice,
        take_until,
        take_while,
        take_while_indexed,
    )
    from ._flattening import (
        concat_all,
        concat_map,
        exclusive,
        expand,
        flat_map,
        flat_map_indexed,
        flat_map_latest,
        merge_all,
        switch_latest,
        switch_map,
        switch_map_indexed,
    )
    from ._flow_control import batch, buffer, limit_rate, map_async, rate_limit
    from ._group_by import GroupedFlowable

    # the operators for LLM pipelines beyond RxPY (DESIGN §3; Akka's semantics)
    from ._hubs import BroadcastHub, PartitionHub, broadcast_hub, partition_hub
    from ._merge_hub import HubProducer, MergeHub, merge_hub
    from ._multicasting import (
        ConnectableFlowable,
        Connection,
        broadcast,
        multicast,
        publish,
        publish_value,
        ref_count,
        replay,
        share,
    )
    from ._partitioned import map_async_partitioned
    from ._prioritized import merge_prioritized
    from ._repeating import do_while, repeat, while_do
    from ._restart import KillSwitch, kill_switch, restart_with_backoff
    from ._shaping import conflate, keep_alive, throttle
    from ._split import Substream, split_when
    from ._timing import (
        TimeInterval,
        Timestamp,
        debounce,
        delay,
        delay_subscription,
        delay_with_mapper,
        sample,
        skip_last_with_time,
        skip_until_with_time,
        skip_with_time,
        take_last_with_time,
        take_until_with_time,
        take_with_time,
        throttle_first,
        throttle_with_mapper,
        throttle_with_timeout,
        time_interval,
        timeout,
        timeout_with_mapper,
        timestamp,
    )
    from ._transforming import (
        dematerialize,
        do,
        do_action,
        filter,
        finally_action,
        map,
        map_indexed,
        materialize,
        pluck,
        pluck_attr,
        scan,
        skip,
        starmap,
        starmap_indexed,
        take,
        tap,
    )
    from ._window_core import Window
    from ._windowing import (
        buffer_toggle,
        buffer_when,
        buffer_with_count,
        buffer_with_time,
        buffer_with_time_or_count,
        group_by,
        group_by_until,
        group_join,
        partition,
        partition_indexed,
        window,
        window_toggle,
        window_when,
        window_with_count,
        window_with_time,
        window_with_time_or_count,
    )

#: module -> the public names it defines, in the order of ``__all__``. A module name starting
#: with "." is a module of this package (a family's manual); the others are absolute: the
#: serving stages are rxpipe.serving's own objects, looked up by name so that importing the
#: generic vocabulary loads no LLM record (``ops.execute is rxpipe.serving.execute``).
_FAMILIES: dict[str, tuple[str, ...]] = {
    "._transforming": ("map", "filter", "scan", "take", "skip", "tap", "map_indexed", "starmap", "starmap_indexed",
                       "pluck", "pluck_attr", "do_action", "do", "finally_action", "materialize", "dematerialize"),
    "._filtering": ("pairwise", "distinct", "distinct_until_changed", "take_while", "skip_while", "take_until",
                    "first", "filter_indexed", "take_while_indexed", "skip_while_indexed", "skip_until",
                    "element_at", "element_at_or_default", "first_or_default", "skip_last", "default_if_empty",
                    "slice"),
    "._aggregating": ("last", "reduce", "count", "to_list", "all", "some", "contains", "is_empty", "sequence_equal",
                      "sum", "average", "min", "max", "min_by", "max_by", "to_dict", "to_set", "to_future", "single",
                      "single_or_default", "find", "find_index", "take_last", "take_last_buffer", "last_or_default",
                      "ignore_elements", "fork_join"),
    "._flow_control": ("buffer", "limit_rate", "batch", "rate_limit", "map_async"),
    "._windowing": ("group_by", "buffer_with_count", "buffer_with_time", "buffer_with_time_or_count", "buffer_when",
                    "buffer_toggle", "window", "window_with_count", "window_with_time", "window_with_time_or_count",
                    "window_when", "window_toggle", "group_by_until", "group_join", "partition",
                    "partition_indexed"),
    "._timing": ("timeout", "debounce", "sample", "throttle_first", "delay", "timestamp", "time_interval",
                 "take_with_time", "skip_with_time", "take_last_with_time", "skip_last_with_time",
                 "take_until_with_time", "skip_until_with_time", "delay_subscription", "delay_with_mapper",
                 "throttle_with_timeout", "throttle_with_mapper", "timeout_with_mapper", "Timestamp", "TimeInterval"),
    "._combining": ("merge", "zip", "combine_latest", "with_latest_from", "concat", "start_with", "amb", "zip_latest",
                    "zip_with_iterable", "zip_with_list", "join"),
    "._flattening": ("flat_map", "concat_map", "switch_map", "merge_all", "concat_all", "switch_latest",
                     "flat_map_indexed", "flat_map_latest", "switch_map_indexed", "expand", "exclusive"),
    "._error_handling": ("catch", "retry", "on_error_resume_next"),
    "._repeating": ("repeat", "do_while", "while_do"),
    "._multicasting": ("broadcast", "publish", "publish_value", "replay", "multicast", "ref_count", "share",
                       "ConnectableFlowable", "Connection"),
    # not operators: the policies of map_async, the type of group_by's groups
    "rxpipe.resilience": ("Retry", "CircuitBreaker"),
    "._group_by": ("GroupedFlowable",),
    "._window_core": ("Window",),
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
