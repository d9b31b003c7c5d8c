"""Drawing a pipeline's shape: text, Mermaid, Graphviz dot and SVG (``rxpipe graph --format``).

The SVG is also the live page's graph: a layered layout (a stage's column is the longest path
to it from a source; rows ordered by their upstreams' rows, the barycenter heuristic of
Sugiyama-style layouts), one ``<g class="stage" data-stage=NAME>`` per stage whose box the page
colours by its busy / backpressured / idle ratios (Flink's colours: red, dark grey, blue).
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from ._shape import Node

__all__ = ["text", "mermaid", "dot", "svg", "layout", "fill_colour", "text_colour", "BOX_W", "BOX_H"]

#: box size and gaps of the SVG layout (pixels)
BOX_W, BOX_H, GAP_X, GAP_Y, PAD = 210, 92, 56, 24, 16
_BUSY, _BACKPRESSURED, _IDLE = (239, 68, 68), (63, 63, 70), (191, 219, 254)


def text(nodes: list[Node]) -> str:
    """One line per stage, upstream first, indented by depth: ``name  (kind...)``, then
    ``  <- a, b`` when its upstreams are not simply the stage above it (or, in a branch, the stage
    that owns the branch): fan-in and a second branch of a fan-out."""
    lines: list[str] = []
    parents: list[str] = []
    previous = None
    for node in nodes:
        del parents[node.depth:]
        implied = {previous} | ({parents[-1]} if parents else set())
        line = f"{'  ' * node.depth}{node.name}  ({node.label})"
        if node.upstream and not (len(node.upstream) == 1 and node.upstream[0] in implied):
            line += "  <- " + ", ".join(node.upstream)
        lines.append(line)
        if len(parents) == node.depth:
            parents.append(node.name)
        else:
            parents[node.depth] = node.name
        previous = node.name
    return "\n".join(lines) + "\n"


def _node_id(name: str) -> str:
    """A Mermaid/dot node id for a stage name (``balance[0]`` → ``balance_0_``)."""
    return re.sub(r"\W", "_", name)


def mermaid(nodes: list[Node]) -> str:
    """A Mermaid flowchart (``graph LR``): one node per stage, one arrow per edge."""
    lines = ["graph LR"]
    for node in nodes:
        lines.append(f'  {_node_id(node.name)}["{node.name}<br/>{node.label}"]')
        lines.extend(f"  {_node_id(up)} --> {_node_id(node.name)}" for up in node.upstream)
    return "\n".join(lines) + "\n"


def _dot_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot(nodes: list[Node]) -> str:
    """A Graphviz digraph, left to right; a branch's stages in a cluster under their owner."""
    lines = ["digraph pipeline {", "  rankdir=LR;", '  node [shape=box, style=rounded, fontname="Helvetica"];']
    for node in nodes:
        label = f"{node.name}\\n{node.label}".replace('"', '\\"')
        lines.append(f'  {_dot_string(node.name)} [label="{label}"];')
    for node in nodes:
        lines.extend(f"  {_dot_string(up)} -> {_dot_string(node.name)};" for up in node.upstream)
    lines.append("}")
    return "\n".join(lines) + "\n"


def layout(nodes: list[Node]) -> tuple[dict[str, tuple[int, int]], int, int]:
    """``({name: (x, y)}, width, height)``: each stage's box corner in a left-to-right layered
    layout (pixels)."""
    column: dict[str, int] = {}
    for node in nodes:  # upstream first: every upstream has its column already
        column[node.name] = 1 + max((column[u] for u in node.upstream if u in column), default=-1)
    columns: dict[int, list[str]] = {}
    for node in nodes:
        columns.setdefault(column[node.name], []).append(node.name)
    row: dict[str, float] = {}
    ups = {node.name: node.upstream for node in nodes}
    for c in sorted(columns):
        names = columns[c]
        if c:
            keys = {}
            for i, name in enumerate(names):
                known = [row[u] for u in ups[name] if u in row]
                keys[name] = (sum(known) / len(known) if known else float(i), i)
            names.sort(key=keys.__getitem__)
        for i, name in enumerate(names):
            row[name] = float(i)
    tallest = max((len(names) for names in columns.values()), default=1)
    where: dict[str, tuple[int, int]] = {}
    for c, names in columns.items():
        offset = (tallest - len(names)) * (BOX_H + GAP_Y) // 2
        for i, name in enumerate(names):
            where[name] = (PAD + c * (BOX_W + GAP_X), PAD + offset + i * (BOX_H + GAP_Y))
    width = 2 * PAD + len(columns) * BOX_W + max(0, len(columns) - 1) * GAP_X
    height = 2 * PAD + tallest * BOX_H + max(0, tallest - 1) * GAP_Y
    return where, width, height


def fill_colour(busy_ms: float, backpressured_ms: float, idle_ms: float) -> str:
    """The box colour for three ratios (ms per s): Flink's busy red, backpressured dark grey and
    idle blue, mixed in proportion (``#rrggbb``)."""
    total = busy_ms + backpressured_ms + idle_ms or 1.0
    mixed = (round((busy_ms * b + backpressured_ms * p + idle_ms * i) / total)
             for b, p, i in zip(_BUSY, _BACKPRESSURED, _IDLE, strict=True))
    return "#" + "".join(f"{value:02x}" for value in mixed)


def text_colour(fill: str) -> str:
    """Black or white, whichever reads better on ``fill`` (``#rrggbb``; WCAG relative
    luminance, threshold 0.4)."""
    r, g, b = (int(fill[k:k + 2], 16) / 255 for k in (1, 3, 5))
    return "#0f172a" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.4 else "#ffffff"


def _figures(stage: dict[str, Any] | None) -> tuple[str, str, str]:
    if stage is None:
        return "", "", ""
    return (f"busy {stage['busy_ms_per_s']} · bp {stage['backpressured_ms_per_s']} · "
            f"idle {stage['idle_ms_per_s']} ms/s",
            f"in {stage['in_per_s']:g}/s · out {stage['out_per_s']:g}/s",
            f"demand {_count(stage['demand'])} · req {_count(stage['requested'])} · held {stage['held']}")


def _count(value: int) -> str:
    return "∞" if value >= 2**63 - 1 else str(value)


def svg(nodes: list[Node], snapshot: dict[str, Any] | None = None) -> str:
    """An SVG drawing of the stages and their edges; with a ``snapshot``
    (:meth:`PipelineView.snapshot`), each box coloured by its ratios and labelled with its
    figures, the bottleneck outlined and marked ``data-bottleneck="true"``."""
    where, width, height = layout(nodes)
    figures = {s["name"]: s for s in snapshot["stages"]} if snapshot is not None else {}
    neck = snapshot.get("bottleneck") if snapshot is not None else None
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="pipeline-graph" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#64748b"/></marker></defs>']
    for node in nodes:
        x2, y2 = where[node.name]
        for up in node.upstream:
            if up not in where:
                continue
            x1, y1 = where[up]
            ax, ay, bx, by = x1 + BOX_W, y1 + BOX_H // 2, x2, y2 + BOX_H // 2
            mid = (ax + bx) // 2
            out.append(f'<path class="edge" data-from="{escape(up)}" data-to="{escape(node.name)}" '
                       f'd="M{ax},{ay} C{mid},{ay} {mid},{by} {bx - 2},{by}" fill="none" stroke="#64748b" '
                       f'stroke-width="1.5" marker-end="url(#arrow)"/>')
    for node in nodes:
        x, y = where[node.name]
        stage = figures.get(node.name)
        ratios = (stage["busy_ms_per_s"], stage["backpressured_ms_per_s"], stage["idle_ms_per_s"]) if stage \
            else (0, 0, 1000)
        fill = fill_colour(*ratios) if stage else "#f1f5f9"
        is_neck = node.name == neck
        lines = (_figures(stage) if stage else ((node.detail[:34], "", "") if node.detail else ("", "", "")))
        kind = node.kind + (", fused" if node.fused else "")
        out.append(f'<g class="stage" data-stage="{escape(node.name)}" data-kind="{escape(node.kind)}" '
                   f'data-bottleneck="{"true" if is_neck else "false"}" transform="translate({x},{y})">'
                   f'<title>{escape(node.name)} ({escape(node.label)})</title>'
                   f'<rect class="box" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{fill}" '
                   f'stroke="{"#dc2626" if is_neck else "#334155"}" stroke-width="{4 if is_neck else 1}"/>')
        ink = text_colour(fill)
        busy_w = round(ratios[0] * (BOX_W - 8) / 1000)
        bp_w = round(ratios[1] * (BOX_W - 8) / 1000)
        out.append(f'<rect class="track" x="3" y="{BOX_H - 12}" width="{BOX_W - 6}" height="9" rx="2" fill="#ffffff"/>')
        out.append(f'<rect class="bar-busy" x="4" y="{BOX_H - 11}" width="{busy_w}" height="7" fill="rgb{_BUSY}"/>'
                   f'<rect class="bar-bp" x="{4 + busy_w}" y="{BOX_H - 11}" width="{bp_w}" height="7" '
                   f'fill="rgb{_BACKPRESSURED}"/>'
                   f'<rect class="bar-idle" x="{4 + busy_w + bp_w}" y="{BOX_H - 11}" '
                   f'width="{BOX_W - 8 - busy_w - bp_w}" height="7" fill="rgb{_IDLE}"/>')
        out.append(f'<g class="ink" fill="{ink}">'
                   f'<text class="name" x="10" y="19" font-weight="bold" font-size="13">{escape(node.name)}</text>'
                   f'<text class="badge" x="{BOX_W - 10}" y="19" text-anchor="end" font-weight="bold" '
                   f'font-size="10">{"BOTTLENECK" if is_neck else ""}</text>'
                   f'<text class="kind" x="10" y="33">{escape(kind)}</text>')
        for k, (cls, line) in enumerate(zip(("ratios", "flow", "demand"), lines, strict=True)):
            out.append(f'<text class="{cls}" x="10" y="{48 + 13 * k}" font-size="11">{escape(line)}</text>')
        out.append("</g>")
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
