"""The public names: ``__all__`` of rxpipe, rxpipe.operators and rxpipe.stage match the contract.

DESIGN §3 (docs/design.md) is the contract; the names it spells out are transcribed here,
and ``docs/architecture.md`` ("Public names") lists every public name, so a name added or
removed without saying so fails.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest

import rxpipe
import rxpipe.serving
import rxpipe.stage
from rxpipe import operators

ROOT = Path(__file__).resolve().parent.parent
MODULES: dict[str, ModuleType] = {"rxpipe": rxpipe, "rxpipe.operators": operators, "rxpipe.stage": rxpipe.stage,
                                  "rxpipe.serving": rxpipe.serving}

#: The names DESIGN §3 spells out, per module (its code block, operator table and "Writing a stage").
DESIGN_3 = {
    "rxpipe": {"from_iterable", "range", "just", "empty", "error", "defer", "from_async_iterable", "interval",
               "from_publisher", "from_observable", "Flowable", "pipe", "UNBOUNDED", "MissingBackpressureError",
               "BufferOverflowError", "CircuitOpenError"},
    "rxpipe.operators": {"map", "filter", "scan", "take", "skip", "tap", "buffer", "limit_rate", "batch",
                         "rate_limit", "map_async", "timeout", "merge", "broadcast", "group_by", "execute",
                         "Retry", "CircuitBreaker"},
    "rxpipe.stage": {"Stage", "operator", "UpstreamLink", "DrainSubscription", "QueueDrainSubscription", "shed",
                     "discard", "Capabilities"},
}

# -- second round (DESIGN §3, "Operators, second round"): filters, reducers, take_until, start_with,
# catch, retry
DESIGN_3["rxpipe"] |= {"SequenceContainsNoElementsError"}
DESIGN_3["rxpipe.operators"] |= {"pairwise", "distinct", "distinct_until_changed", "take_while", "skip_while",
                                 "take_until", "first", "last", "reduce", "count", "to_list", "start_with",
                                 "catch", "retry"}
# -- second round (issue 22): time operators and sources --
DESIGN_3["rxpipe"] |= {"timer", "never", "from_future"}
DESIGN_3["rxpipe.operators"] |= {"debounce", "sample", "throttle_first", "delay"}
# -- operators, third round (issue 34): the whole reactivex vocabulary
DESIGN_3["rxpipe.operators"] |= {"map_indexed", "filter_indexed", "starmap", "pluck", "do_action", "finally_action",
                                 "materialize", "dematerialize", "default_if_empty", "element_at", "skip_last",
                                 "slice"}
DESIGN_3["rxpipe.operators"] |= {"all", "some", "contains", "is_empty", "sequence_equal", "sum", "average", "min",
                                 "max", "min_by", "max_by", "to_dict", "to_set", "to_future", "single", "find",
                                 "find_index", "take_last", "last_or_default", "ignore_elements", "fork_join"}
DESIGN_3["rxpipe.operators"] |= {"merge_all", "concat_all", "switch_latest", "flat_map_indexed", "flat_map_latest",
                                 "switch_map_indexed", "expand", "amb", "zip_latest", "zip_with_iterable", "join",
                                 "on_error_resume_next", "repeat", "do_while", "while_do"}
DESIGN_3["rxpipe.operators"] |= {"timestamp", "time_interval", "take_with_time", "skip_with_time", "delay_subscription",
                                 "delay_with_mapper", "throttle_with_timeout", "throttle_with_mapper",
                                 "timeout_with_mapper"}
# -- layout, second round (DESIGN §1): the serving domain in its own package
DESIGN_3["rxpipe.serving"] = {"CompletionRequest", "Completion", "TokenChunk", "CompletionResult", "Engine", "execute",
                              "edge_queue", "fair_queue", "balance", "prefix_affinity", "cache"}
# -- the kit, third round (issue 33): reactivex's creation functions --
DESIGN_3["rxpipe"] |= {"of", "from_", "from_list", "return_value", "throw", "create", "generate", "repeat_value",
                       "from_callable", "start", "amb", "fork_join", "case", "if_then", "using",
                       "on_error_resume_next"}
DESIGN_3["rxpipe"] |= {"catch", "catch_with_iterable", "concat_with_iterable", "for_in", "with_latest_from",
                       "zip_latest", "generate_with_relative_time", "start_async", "from_callback", "to_async"}
# -- operators for LLM pipelines beyond RxPY (DESIGN §3; issue 41) --
DESIGN_3["rxpipe.operators"] |= {"throttle", "map_async_partitioned", "conflate", "keep_alive", "kill_switch",
                                 "restart_with_backoff", "split_when", "merge_prioritized", "merge_hub",
                                 "broadcast_hub", "partition_hub"}
# -- operators, third round: the hot family (DESIGN §3; issue 34) --
DESIGN_3["rxpipe.operators"] |= {"publish", "publish_value", "replay", "multicast", "ref_count", "share"}


def documented() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## Public names"):]
    found: dict[str, set[str]] = {}
    for module, names in re.findall(r"^- `([\w.]+)`: (.*?)(?=^- |\Z)", section, re.S | re.M):
        found[module] = {name.strip() for name in names.replace("\n", " ").split(",")}
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_all_is_exactly_what_the_architecture_page_lists(module: str) -> None:
    names = MODULES[module].__all__
    assert len(names) == len(set(names))
    assert set(names) == documented()[module]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_name_design_3_spells_out_is_public_and_real(module: str) -> None:
    assert DESIGN_3[module] <= set(MODULES[module].__all__)
    for name in MODULES[module].__all__:
        assert hasattr(MODULES[module], name), name


def test_nothing_outside_the_core_imports_the_private_demand_module() -> None:
    offenders = [str(path.relative_to(ROOT)) for folder in ("operators", "rxpipe/serving", "rxpipe/engines",
                                                              "rxpipe/gateway",
                                                              "rxpipe/testing", "rxpipe/redis", "rxpipe/nats",
                                                              "rxpipe/transport", "pipelines", "tests")
                 for path in sorted((ROOT / folder).rglob("*.py"))
                 if re.search(r"^\s*(from|import)\s+(rxpipe\.|\.+)_(demand|link)\b", path.read_text(), re.M)]
    assert offenders == []


#: (old public path, attribute) -> the rxpipe.serving name it must be the same object as
OLD_PATHS = {
    **{("rxpipe.engines", name): name for name in ("CompletionRequest", "TokenChunk", "CompletionResult", "Completion",
                                                   "FINISH_REASONS", "estimate_tokens", "Engine", "execute",
                                                   "ExecuteFlowable")},
    **{("rxpipe.engines.records", name): name for name in ("CompletionRequest", "TokenChunk", "CompletionResult",
                                                           "Completion", "FINISH_REASONS", "estimate_tokens")},
    ("rxpipe.engines.base", "Engine"): "Engine",
    ("rxpipe.engines.executor", "execute"): "execute",
    ("rxpipe.engines.executor", "ExecuteFlowable"): "ExecuteFlowable",
    **{("rxpipe.operators", name): name for name in ("execute", "fair_queue", "balance", "prefix_affinity", "cache")},
    **{("rxpipe.gateway", name): name for name in ("edge_queue", "EdgeQueueFlowable", "ReplyFuture",
                                                   "reply_departure")},
}


@pytest.mark.parametrize(("old", "name"), sorted(OLD_PATHS), ids=lambda v: str(v))
def test_every_old_public_path_is_the_same_object_as_servings(old: str, name: str) -> None:
    import importlib

    assert getattr(importlib.import_module(old), name) is getattr(rxpipe.serving, OLD_PATHS[(old, name)])


def test_importing_the_generic_vocabulary_loads_no_llm_record() -> None:
    import subprocess
    import sys

    code = "import sys, rxpipe, rxpipe.operators; print('rxpipe.serving' in sys.modules, 'aiohttp' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=60).stdout.split() == ["False", "False"]


def test_dir_of_the_operators_lists_the_public_names_only() -> None:
    assert dir(operators) == sorted(operators.__all__)
    assert not {"Any", "Callable", "TypeVar", "TYPE_CHECKING", "T", "R", "math", "fuse"} & set(dir(operators))
