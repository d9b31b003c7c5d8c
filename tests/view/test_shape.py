"""The static shape (``rxpipe graph``): fan-out and fan-in edges, and each format's exact text."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.loader import build_pipeline, load_module
from rxpipe.runtime import Pipeline
from rxpipe.view import dot, mermaid, shape, svg, text

ROOT = Path(__file__).resolve().parents[2]


def load(name: str, **config: object) -> Pipeline:
    module, attribute = load_module(str(ROOT / "pipelines" / name))
    return build_pipeline(module, attribute, dict(config), path=ROOT / "pipelines" / name)


def test_broadcast_fans_out_and_zip_fans_in() -> None:
    nodes = shape(load("embed_documents.py"))
    assert [(n.name, n.kind, n.upstream) for n in nodes] == [
        ("from_iterable_0", "from_iterable", ()), ("split", "flat_map", ("from_iterable_0",)),
        ("broadcast_2", "broadcast", ("split",)), ("broadcast_2[0]", "broadcast_branch", ("broadcast_2",)),
        ("broadcast_2[1]", "broadcast_branch", ("broadcast_2",)), ("map_4", "map", ("broadcast_2[1]",)),
        ("batch", "batch", ("map_4",)), ("embed", "map_async", ("batch",)), ("unbatch", "flat_map", ("embed",)),
        ("pair", "zip", ("broadcast_2[0]", "unbatch")), ("format", "map", ("pair",))]
    assert text(nodes).splitlines() == [
        "from_iterable_0  (from_iterable)", "split  (flat_map)", "broadcast_2  (broadcast)",
        "broadcast_2[0]  (broadcast_branch)", "broadcast_2[1]  (broadcast_branch)  <- broadcast_2",
        "map_4  (map, fused)", "batch  (batch)", "embed  (map_async)", "unbatch  (flat_map)",
        "pair  (zip)  <- broadcast_2[0], unbatch", "format  (map, fused)"]


def test_a_stage_after_a_balance_takes_the_branches_last_stages_as_upstreams() -> None:
    source = rx.range(0, 10)
    flowable = source.pipe(
        ops.balance(rx.pipe(ops.map(lambda x: x, name="left"), ops.buffer(4, name="left_q")),
                    ops.map(lambda x: -x, name="right"), name="fan"),
        ops.buffer(8, name="after"))
    nodes = shape(Pipeline(flowable))
    assert [(n.name, n.upstream, n.depth) for n in nodes] == [
        ("range_0", (), 0), ("fan", ("range_0",), 0),
        ("fan[0]", ("fan",), 1), ("left", ("fan[0]",), 1), ("left_q", ("left",), 1),
        ("fan[1]", ("fan",), 1), ("right", ("fan[1]",), 1),
        ("after", ("left_q", "right"), 0)]
    assert text(nodes).splitlines() == [
        "range_0  (range)", "fan  (balance)", "  fan[0]  (balance_port)", "  left  (map, fused)",
        "  left_q  (buffer)", "  fan[1]  (balance_port)", "  right  (map, fused)", "after  (buffer)  <- left_q, right"]
    assert mermaid(nodes).splitlines()[-3:] == ['  after["after<br/>buffer"]', "  left_q --> after",
                                                "  right --> after"]


def test_dot_and_mermaid_name_every_stage_and_edge() -> None:
    nodes = shape(load("llm_gateway.py"))
    assert dot(nodes) == (
        'digraph pipeline {\n  rankdir=LR;\n  node [shape=box, style=rounded, fontname="Helvetica"];\n'
        '  "gateway" [label="gateway\\ngateway"];\n  "rate_limit" [label="rate_limit\\nrate_limit"];\n'
        '  "queue" [label="queue\\nedge_queue"];\n  "batch" [label="batch\\nbatch"];\n'
        '  "executor" [label="executor\\nexecute; engine sim: SimulatedEngine"];\n'
        '  "gateway" -> "rate_limit";\n  "rate_limit" -> "queue";\n  "queue" -> "batch";\n'
        '  "batch" -> "executor";\n}\n')
    assert mermaid(nodes).splitlines()[:3] == ["graph LR", '  gateway["gateway<br/>gateway"]',
                                               '  rate_limit["rate_limit<br/>rate_limit"]']


def test_svg_is_well_formed_with_one_group_per_stage_and_one_path_per_edge() -> None:
    nodes = shape(load("embed_documents.py"))
    drawing = svg(nodes)
    root = ET.fromstring(drawing)
    ns = {"s": "http://www.w3.org/2000/svg"}
    groups = root.findall("s:g[@class='stage']", ns)
    assert [g.get("data-stage") for g in groups] == [n.name for n in nodes]
    edges = {(p.get("data-from"), p.get("data-to")) for p in root.findall("s:path[@class='edge']", ns)}
    assert edges == {(up, n.name) for n in nodes for up in n.upstream}
    assert all(g.get("data-bottleneck") == "false" for g in groups)
    # the two branches of the broadcast are in one column, one above the other
    where = {g.get("data-stage"): tuple(map(int, re.findall(r"\d+", g.get("transform") or ""))) for g in groups}
    assert where["broadcast_2[0]"][0] == where["broadcast_2[1]"][0]
    assert where["broadcast_2[0]"][1] != where["broadcast_2[1]"][1]
    assert where["pair"][0] > where["unbatch"][0] > where["broadcast_2[0]"][0]
