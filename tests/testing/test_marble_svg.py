"""``draw_marbles``: the picture holds exactly the events the parser reads from the text."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from rxpipe.testing import draw_marbles
from rxpipe.testing._marble_parse import MarbleRow, docstring_marble_rows

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg" and root.get("role") == "img"
    return root


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def marbles(root: ET.Element) -> list[tuple[float, float, str]]:
    """(x, y, text) of every item marble, in drawing order."""
    shapes = [e for e in root.iter() if e.tag in (f"{SVG}circle", f"{SVG}rect") and e.get("stroke") == "#1f2328"]
    labels = [t for t in root.iter(f"{SVG}text") if t.get("fill") == "#ffffff"]
    assert len(shapes) == len(labels)
    return [(float(t.get("x", 0)), float(s.get("cy") or float(s.get("y", 0)) + 11), t.text or "")
            for s, t in zip(shapes, labels, strict=True)]


def test_items_sit_one_frame_apart_on_their_rows_with_the_completion_bar() -> None:
    root = parse(draw_marbles("source:  -1-2-3-|\noutput:  -2-4-6-|        map(lambda x: x * 2)"))
    drawn = marbles(root)
    assert [text for *_, text in drawn] == ["1", "2", "3", "2", "4", "6"]
    xs = [x for x, _, _ in drawn]
    assert [round(b - a) for a, b in zip(xs[:2], xs[1:3], strict=True)] == [60, 60]  # two frames of 30 px
    assert xs[:3] == xs[3:]  # the same frames on both rows
    ys = sorted({y for _, y, _ in drawn})
    assert len(ys) == 2 and ys[1] - ys[0] == 46
    bars = [line for line in root.iter(f"{SVG}line") if line.get("stroke-width") == "2.5"]
    assert len(bars) == 2 and float(bars[0].get("x1", 0)) == xs[2] + 60  # '|' two frames after 3
    assert "output: map(lambda x: x * 2)" in texts(root)
    assert root.findtext(f"{SVG}title") == "source: -1-2-3-|\noutput: -2-4-6-|"


def test_the_same_value_has_the_same_colour() -> None:
    root = parse(draw_marbles({"source": "-a-b-a-|"}))
    fills = [c.get("fill") for c in root.iter(f"{SVG}circle")]
    assert fills[0] == fills[2] != fills[1]


def test_demand_marks_are_request_arrows_with_their_counts_and_a_cancel() -> None:
    root = parse(draw_marbles("source: -a-b-c-|\ndemand: ^1--^*-!"))
    assert [t for t in texts(root) if t in ("1", "∞", "cancel")] == ["1", "∞", "cancel"]
    arrows = [p for p in root.iter(f"{SVG}path") if (p.get("d") or "").endswith("z")]
    assert len(arrows) == 2


def test_groups_errors_named_items_and_prose() -> None:
    root = parse(draw_marbles("source:  (ab#)"))
    assert [text for *_, text in marbles(root)] == ["ab"]  # one pill for the frame
    assert [p for p in root.iter(f"{SVG}path") if p.get("stroke") == "#cf222e"]  # the error's cross
    lanes = parse(draw_marbles("source:  -a1--b12-|\nbranches: x demand 4, y demand 4"))
    assert [text for *_, text in marbles(lanes)] == ["a1", "b12"]
    assert "x demand 4, y demand 4" in [t.strip() for t in texts(lanes)]


def test_a_docstrings_rows_draw_with_their_comments_as_the_caption() -> None:
    (rows,) = docstring_marble_rows("""Keep the even items.

        source:  -1-2-3-4-|
        demand:  ^2
        output:  ---2---4-|      filter(is_even)

    Demand: one more per dropped item.
    """)
    assert rows == [MarbleRow("source", "-1-2-3-4-|"), MarbleRow("demand", "^2"),
                    MarbleRow("output", "---2---4-|", "filter(is_even)")]
    root = parse(draw_marbles(rows))
    assert [text for *_, text in marbles(root)] == ["1", "2", "3", "4", "2", "4"]
    assert "output: filter(is_even)" in texts(root)


def test_text_escapes_and_errors() -> None:
    svg = draw_marbles("source: -a-|   <x & y>")
    assert "&lt;x &amp; y&gt;" in svg
    parse(svg)
    with pytest.raises(ValueError, match="no 'label: diagram' line"):
        draw_marbles("just prose")
    with pytest.raises(ValueError, match=re.escape("nested group at column 2")):
        draw_marbles("source: -((a))")
