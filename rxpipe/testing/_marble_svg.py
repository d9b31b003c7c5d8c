"""Marble diagrams drawn as SVG pictures, in the look of RxJS's and Reactor's reference pages.

The text is read by the parser the marble kit plays (:mod:`rxpipe.testing._marble_parse`), so
a picture shows exactly the events a test executes: one column of the text is one frame of
time, an item a coloured marble (the same value, the same colour), ``(ab)`` items of one frame,
``|`` completion as a bar, ``#`` an error as a cross, and in a demand line ``^n`` a
``request(n)`` (an arrow up, ``∞`` for ``^*``) and ``!`` a ``cancel()``.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping, Sequence
from html import escape
from typing import NamedTuple

from .._protocol import UNBOUNDED
from ._marble_parse import MarbleRow, marble_blocks, parse_demand, parse_marbles

__all__ = ["draw_marbles"]

#: pixels: one frame, a row, a marble's radius, the margins
STEP, ROW, RADIUS, PAD = 30, 46, 11, 14
_FONT = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"
#: marble fills (white text reads on each), chosen by the value's text
_PALETTE = ("#3f7fbf", "#d9822b", "#3a9e5c", "#b5485d", "#7a5cb8", "#2a9d9d", "#a8773a", "#5b6b7f")
_INK, _FAINT, _ERROR = "#1f2328", "#8c959f", "#cf222e"
#: a row that is prose, not time: punctuation no diagram uses, or a word beside a space
_PROSE = re.compile(r"[\[\],=_.:;'\"]|[A-Za-z]{3,}\s|\s[A-Za-z]{3,}")
#: a letter followed by digits, as one item's name (``a1``, ``B12``)
_NAMED = re.compile(r"[A-Za-z]\d+")


class _Mark(NamedTuple):
    frame: int
    kind: str  # "next", "group", "complete", "error", "request", "cancel"
    text: str = ""


def draw_marbles(diagram: str | Sequence[MarbleRow] | Mapping[str, str], *, title: str | None = None) -> str:
    """Draw a marble diagram as an SVG document (a string, UTF-8 text), for a manual's page.

        source:  -1-2-3-|
        output:  -2-4-6-|        map(lambda x: x * 2)

    That block, as text (``label: diagram`` lines on one column origin, a comment after two
    spaces, as docstrings write them), gives a picture of two timelines and the caption
    ``output: map(lambda x: x * 2)``. ``diagram`` may also be the rows of a docstring's block
    (:func:`~rxpipe.testing._marble_parse.docstring_marble_rows`) or a mapping
    ``{label: diagram}``. Rows are drawn top to bottom: item lines as timelines of marbles,
    demand lines (``demand``, ``upstream``, and any line of ``^n`` and ``!`` marks) as request
    arrows, any other line (prose such as ``x demand 4``) as written.
    ``title``: the picture's accessible title (default: the diagram's text).
    Raises ValueError for text without a ``label: diagram`` line, or a malformed item line (the
    parser's message). The manual draws every operator's docstring diagram with it, the same
    text ``tests/docstring_marbles/`` plays.
    """
    rows = _rows(diagram)
    if not rows:
        raise ValueError(f"no 'label: diagram' line in {diagram!r}")
    drawn = [(row, _marks(row)) for row in rows]
    frames = max((_span(row, marks) for row, marks in drawn), default=1)
    label_w = 12 + 7.4 * max(len(row.label) for row in rows)
    x0 = PAD + label_w + 10
    width = x0 + STEP * (frames + 1) + PAD
    captions = [f"{row.label}: {row.comment}" for row in rows if row.comment]
    width = max(width, PAD * 2 + 7.0 * max((len(c) for c in captions), default=0))
    height = PAD * 2 + ROW * len(rows) + 17 * len(captions)
    text = title if title is not None else "\n".join(f"{r.label}: {r.diagram}" for r in rows)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" font-family="{_FONT}" font-size="13">',
           f"<title>{escape(text)}</title>",
           f'<rect width="{width:.0f}" height="{height:.0f}" rx="8" fill="#ffffff" stroke="#d0d7de"/>']
    for i, (row, marks) in enumerate(drawn):
        y = PAD + ROW * i + ROW / 2
        out.append(f'<text x="{PAD}" y="{y + 4.5:.1f}" fill="{_FAINT}">{escape(row.label)}</text>')
        out.extend(_row(row, marks, x0, y, width - PAD))
    for k, caption in enumerate(captions):
        y = PAD + ROW * len(rows) + 17 * k + 12
        out.append(f'<text x="{PAD}" y="{y:.1f}" fill="{_FAINT}" font-size="11.5">{escape(caption)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _rows(diagram: str | Sequence[MarbleRow] | Mapping[str, str]) -> list[MarbleRow]:
    if isinstance(diagram, Mapping):
        return [MarbleRow(label, text) for label, text in diagram.items()]
    if not isinstance(diagram, str):
        return [MarbleRow(*row) for row in diagram]
    lines = [line for line in diagram.splitlines() if line.strip()]
    indent = min((len(line) - len(line.lstrip()) for line in lines), default=0)
    blocks = marble_blocks(["    " + line[indent:] for line in lines], require_source=False)  # one time origin
    return blocks[0] if blocks else []


def _kind(row: MarbleRow) -> str:
    if row.label in ("demand", "upstream") or ("^" in row.diagram or "!" in row.diagram):
        try:
            parse_demand(row.diagram)
            return "demand"
        except ValueError:
            pass
    if _PROSE.search(row.diagram):
        return "prose"
    return "items"


def _marks(row: MarbleRow) -> list[_Mark]:
    kind = _kind(row)
    if kind == "prose":
        return []
    if kind == "demand":
        return [_Mark(frame, "cancel") if n is None else _Mark(frame, "request", "∞" if n == UNBOUNDED else str(n))
                for frame, n in parse_demand(row.diagram)]
    events = parse_marbles(row.diagram)
    marks: list[_Mark] = []
    by_frame: dict[int, list[str]] = {}
    for event in events:
        text = "|" if event.kind == "complete" else "#" if event.kind == "error" else str(event.value)
        by_frame.setdefault(event.frame, []).append(text)
    for frame, texts in sorted(by_frame.items()):
        items = [t for t in texts if t not in "|#"]
        end = [t for t in texts if t in "|#"]
        if len(items) > 1:
            marks.append(_Mark(frame, "group", "".join(items)))
        elif items:
            marks.append(_Mark(frame, "next", items[0]))
        if end:
            marks.append(_Mark(frame, "complete" if end[0] == "|" else "error"))
    if _NAMED.search(row.diagram) and "(" not in row.diagram:
        marks = _named(marks)
    return marks


def _named(marks: list[_Mark]) -> list[_Mark]:
    """``a1`` is one item named a1, not items ``a`` and ``1`` in two frames (group_by's lanes)."""
    merged: list[_Mark] = []
    for mark in marks:
        last = merged[-1] if merged else None
        if (mark.kind == "next" and mark.text.isdigit() and last is not None and last.kind == "next"
                and last.frame + len(last.text) == mark.frame and last.text[0].isalpha()):
            merged[-1] = last._replace(text=last.text + mark.text)
        else:
            merged.append(mark)
    return merged


def _span(row: MarbleRow, marks: list[_Mark]) -> int:
    if not marks:
        return max(1, int(len(row.diagram) * 7.4 // STEP))
    return max(mark.frame for mark in marks) + 1


def _x(x0: float, frame: int) -> float:
    return x0 + STEP * frame + STEP / 2


def _colour(text: str) -> str:
    return _PALETTE[zlib.crc32(text.encode()) % len(_PALETTE)]


def _row(row: MarbleRow, marks: list[_Mark], x0: float, y: float, right: float) -> list[str]:
    if not marks:  # prose: as written, from the time origin
        return [f'<text x="{x0:.1f}" y="{y + 4.5:.1f}" fill="{_INK}" xml:space="preserve">{escape(row.diagram)}</text>']
    out: list[str] = []
    demand = marks[0].kind in ("request", "cancel")
    end = next((m for m in marks if m.kind in ("complete", "error")), None)
    # a terminal in an item's frame ("(ab|)") is drawn just after that item
    shared = {m.frame: _half(m) + 6 for m in marks if m.kind in ("next", "group")}
    stop = _x(x0, end.frame) + shared.get(end.frame, 0) if end is not None else right - 4
    dash = ' stroke-dasharray="3 4"' if demand else ""
    colour = _FAINT if demand else _INK
    out.append(f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{stop:.1f}" y2="{y:.1f}" stroke="{colour}" '
               f'stroke-width="{1.2 if demand else 1.8}"{dash}/>')
    if end is None and not demand:
        out.append(f'<path d="M{stop - 8:.1f},{y - 5:.1f} L{stop:.1f},{y:.1f} L{stop - 8:.1f},{y + 5:.1f}" '
                   f'fill="none" stroke="{_INK}" stroke-width="1.8"/>')
    for mark in marks:
        x = _x(x0, mark.frame)
        if mark.kind in ("complete", "error"):
            x += shared.get(mark.frame, 0)
        if mark.kind == "request":
            out.append(f'<path d="M{x:.1f},{y - 13:.1f} l-6,9 h12 z" fill="{_INK}"/>'
                       f'<line x1="{x:.1f}" y1="{y - 5:.1f}" x2="{x:.1f}" y2="{y + 7:.1f}" stroke="{_INK}" '
                       f'stroke-width="2"/>'
                       f'<text x="{x + 7:.1f}" y="{y + 14:.1f}" fill="{_INK}" font-size="12">'
                       f'{escape(mark.text)}</text>')
        elif mark.kind == "cancel":
            out.append(_cross(x, y, _ERROR) +
                       f'<text x="{x + 9:.1f}" y="{y + 15:.1f}" fill="{_ERROR}" font-size="11">cancel</text>')
        elif mark.kind == "complete":
            out.append(f'<line x1="{x:.1f}" y1="{y - 12:.1f}" x2="{x:.1f}" y2="{y + 12:.1f}" stroke="{_INK}" '
                       f'stroke-width="2.5"/>')
        elif mark.kind == "error":
            out.append(_cross(x, y, _ERROR))
        else:
            out.append(_marble(x, y, mark))
    return out


def _half(mark: _Mark) -> float:
    """Half the width of an item's marble (a group's pill grows with its items)."""
    if mark.kind == "group":
        return max(RADIUS, 4 + 3.6 * len(mark.text))
    return max(RADIUS, 3 + 3.5 * len(mark.text))


def _marble(x: float, y: float, mark: _Mark) -> str:
    text = mark.text
    size = 13 if len(text) <= 1 else 11.5 if len(text) <= 3 else 10.5
    half = _half(mark)
    if mark.kind == "group":  # items of one frame: one pill, the items in their order
        shape = (f'<rect x="{x - half:.1f}" y="{y - RADIUS:.1f}" width="{2 * half:.1f}" height="{2 * RADIUS}" '
                 f'rx="{RADIUS}" fill="{_colour(text[0])}" stroke="{_INK}" stroke-width="1.2"/>')
    else:
        shape = (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{half:.1f}" fill="{_colour(text)}" stroke="{_INK}" '
                 f'stroke-width="1.2"/>')
    return (shape + f'<text x="{x:.1f}" y="{y + size / 2.8:.1f}" fill="#ffffff" font-size="{size}" '
            f'text-anchor="middle">{escape(text)}</text>')


def _cross(x: float, y: float, colour: str) -> str:
    return (f'<path d="M{x - 7:.1f},{y - 7:.1f} L{x + 7:.1f},{y + 7:.1f} M{x + 7:.1f},{y - 7:.1f} '
            f'L{x - 7:.1f},{y + 7:.1f}" stroke="{colour}" stroke-width="2.5"/>')
