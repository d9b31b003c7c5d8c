"""Marble diagrams as data: parse item and demand diagrams, draw events back, match them.

The language is described in :mod:`rxpipe.testing._marbles`; this module knows only the text,
not the clock or the sources that play it.
"""

from __future__ import annotations

import inspect
import re
from collections import defaultdict
from typing import Any, Mapping, NamedTuple, Sequence

from .._protocol import UNBOUNDED

__all__ = ["MarbleError", "MarbleEvent", "MarbleRow", "parse_demand", "parse_marbles", "render_marbles",
           "docstring_marbles", "docstring_marble_rows", "marble_blocks"]

_SILENT = "- "
_SPECIAL = frozenset("-|#()^! ")
ErrorSpec = BaseException | type[BaseException]


class MarbleError(Exception):
    """The default error a source's ``#`` signals."""


class MarbleEvent(NamedTuple):
    """One signal at one frame: ``kind`` is ``"next"`` (``value`` the item), ``"error"``
    (``value`` the exception, or in an expected diagram the class/instance to match, or None
    for any) or ``"complete"``."""

    frame: int
    kind: str
    value: Any = None


# -- parsing and rendering --------------------------------------------------------------------
def _value(char: str, values: Mapping[str, Any] | None) -> Any:
    if values is not None and char in values:
        return values[char]
    if char.isdigit():
        return int(char)
    return char


def parse_marbles(diagram: str, values: Mapping[str, Any] | None = None,
                  error: Any = None) -> list[MarbleEvent]:
    """Parse an item diagram into events, in order: ``"-a-(bc)-|"`` →
    ``[(1, next, 'a'), (3, next, 'b'), (3, next, 'c'), (5, complete)]``.

    ``error`` is the value of a ``#`` event. Raises ValueError for a malformed diagram
    (nested or unclosed groups, events after a terminal mark, demand marks).
    """
    events: list[MarbleEvent] = []
    group: int | None = None  # the frame of the open group
    group_size = 0
    terminated = False
    frame = 0
    for column, char in enumerate(diagram):
        if char == "(":
            if group is not None:
                raise ValueError(f"nested group at column {column} of {diagram!r}")
            group, group_size = frame, 0
            continue
        if char == ")":
            if group is None:
                raise ValueError(f"')' without '(' at column {column} of {diagram!r}")
            if group_size == 0:
                raise ValueError(f"empty group at column {column} of {diagram!r}")
            group = None
            frame += 1  # the whole group is one frame
            continue
        if char in _SILENT:
            if group is not None:
                raise ValueError(f"time mark inside a group at column {column} of {diagram!r}")
            frame += 1
            continue
        if char in "^!":
            raise ValueError(f"{char!r} at column {column} of {diagram!r}: demand marks belong "
                             f"in the demand diagram")
        if terminated:
            raise ValueError(f"{char!r} at column {column} of {diagram!r} follows a terminal mark")
        if char == "|":
            event = MarbleEvent(frame, "complete")
            terminated = True
        elif char == "#":
            event = MarbleEvent(frame, "error", error)
            terminated = True
        else:
            event = MarbleEvent(frame, "next", _value(char, values))
        events.append(event)
        if group is None:
            frame += 1
        else:
            group_size += 1
    if group is not None:
        raise ValueError(f"unclosed group in {diagram!r}")
    return events


def parse_demand(diagram: str) -> list[tuple[int, int | None]]:
    """Parse a demand diagram into ``(frame, n)`` marks; ``n`` is None for a cancel (``!``).

    ``"^1---^12-!"`` → ``[(0, 1), (5, 12), (9, None)]``; ``"^*"`` → ``[(0, UNBOUNDED)]``.
    Raises ValueError for anything else (an item, a ``^`` without a count).
    """
    marks: list[tuple[int, int | None]] = []
    i = 0
    while i < len(diagram):
        char = diagram[i]
        if char in _SILENT:
            i += 1
        elif char == "!":
            marks.append((i, None))
            i += 1
        elif char == "^":
            j = i + 1
            if diagram[j:j + 1] == "*":
                n, j = UNBOUNDED, j + 1
            else:
                while j < len(diagram) and diagram[j].isdigit():
                    j += 1
                if j == i + 1:
                    raise ValueError(f"'^' at column {i} of demand {diagram!r} needs a count "
                                     f"(^3) or '*' (UNBOUNDED)")
                n = int(diagram[i + 1:j])
            marks.append((i, n))  # in the column of '^'; the count's columns are silent frames
            i = j
        else:
            raise ValueError(f"{char!r} at column {i} of demand {diagram!r}: a demand diagram "
                             f"holds only '-', ' ', '^n', '^*' and '!'")
    return marks


def _length(diagram: str) -> int:
    """Frames an item or demand diagram spans (a group counts one frame)."""
    frames = 0
    in_group = False
    for char in diagram:
        if char == "(":
            in_group = True
        elif char == ")":
            in_group = False
            frames += 1
        elif not in_group:
            frames += 1
    return frames


def _char(value: Any, values: Mapping[str, Any] | None) -> str:
    if values:
        for char, candidate in values.items():
            try:
                if candidate is value or (type(candidate) is type(value) and candidate == value):
                    return char
            except Exception:  # an == that raises (arrays): not this one
                continue
    if type(value) is int and 0 <= value <= 9:
        return str(value)
    if isinstance(value, str) and len(value) == 1 and value not in _SPECIAL:
        return value
    return "?"


def render_marbles(events: Sequence[MarbleEvent], values: Mapping[str, Any] | None = None,
                   frames: int = 0) -> str:
    """Draw events as a diagram (the inverse of :func:`parse_marbles`), padded with ``-`` up to
    frame ``frames`` when nothing terminated. A value without a character (not in ``values``, not
    a digit or one-character string) is drawn ``?``; :attr:`MarbleResult.timeline` has it."""
    by_frame: dict[int, list[MarbleEvent]] = defaultdict(list)
    for event in events:
        by_frame[event.frame].append(event)
    out: list[str] = []
    frame = 0
    for at in sorted(by_frame):
        group = by_frame[at]
        out.append("-" * (at - frame))
        chars = "".join("|" if e.kind == "complete" else "#" if e.kind == "error" else _char(e.value, values)
                        for e in group)
        out.append(chars if len(group) == 1 else f"({chars})")
        frame = at + 1
    if not any(e.kind != "next" for e in events) and frames + 1 > frame:
        out.append("-" * (frames + 1 - frame))
    return "".join(out)


def _parse_block(text: str) -> dict[str, str]:
    """Split a docstring-like block (``label: diagram`` lines) into diagrams sharing one time
    origin: the leftmost column where a diagram starts."""
    rows: list[tuple[str, str, int]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        label, colon, rest = line.partition(":")
        if not colon:
            raise ValueError(f"marble block line {line!r} needs 'label: diagram'")
        start = len(line) - len(rest.lstrip()) if rest.strip() else len(line)
        rows.append((label.strip(), line, start))
    origin = min(start for _, _, start in rows)
    diagrams: dict[str, str] = {}
    for label, line, _ in rows:
        key = {"expected": "output", "cold": "source"}.get(label, label)
        if key not in ("source", "hot", "demand", "output"):
            raise ValueError(f"unknown marble label {label!r} (source, hot, demand, output)")
        if key in diagrams or (key in ("source", "hot") and ("source" in diagrams or "hot" in diagrams)):
            raise ValueError(f"marble block names {label!r} twice")
        diagrams[key] = line[origin:].rstrip()
    return diagrams


def _error_value(error: Any) -> BaseException:
    if error is None:
        return MarbleError("#")
    if isinstance(error, type) and issubclass(error, BaseException):
        return error()
    if isinstance(error, BaseException):
        return error
    raise TypeError(f"error= needs an exception or an exception class, got {error!r}")


def _error_matches(expected: Any, actual: Any) -> bool:
    if expected is None or expected is actual:
        return True
    if isinstance(expected, type):
        return isinstance(actual, expected)
    return type(actual) is type(expected) and getattr(actual, "args", None) == expected.args


def _same(expected: MarbleEvent, actual: MarbleEvent) -> bool:
    if expected.frame != actual.frame or expected.kind != actual.kind:
        return False
    if expected.kind == "error":
        return _error_matches(expected.value, actual.value)
    return bool(expected.value == actual.value)


def _describe(events: Sequence[MarbleEvent]) -> str:
    parts = []
    for e in events:
        if e.kind == "next":
            parts.append(f"{e.frame}:{e.value!r}")
        elif e.kind == "complete":
            parts.append(f"{e.frame}:|")
        else:
            parts.append(f"{e.frame}:#{e.value!r}")
    return "[" + ", ".join(parts) + "]"



# -- the diagrams of a docstring ---------------------------------------------------------------
_LABEL = re.compile(r"^\s{4,}(?P<label>[A-Za-z_][\w ,]*):(?P<rest>\s.*)?$")
_COMMENT = re.compile(r"\s{2,}(?=[^\s^])")


class MarbleRow(NamedTuple):
    """One line of a docstring's marble block: ``label`` (``source``, ``demand``, ``output``,
    ``upstream``, an inner stream's letter ...), the ``diagram`` from the block's common time
    origin, and the ``comment`` written after it ("" if none)."""

    label: str
    diagram: str
    comment: str = ""


def docstring_marble_rows(doc: str) -> list[list[MarbleRow]]:
    """The marble blocks of a docstring, each a list of :class:`MarbleRow` in the written order.

    A block is a run of lines indented by four or more spaces, each ``label: diagram``, with a
    ``source:`` (or ``observable:``) line among them; the diagrams share one time origin, the
    leftmost column where one starts. Two or more spaces followed by anything but ``^`` (a
    request mark) start a comment. The test suite plays every block of every public docstring
    (``tests/docstring_marbles/``) and the manual draws the same blocks
    (:func:`~rxpipe.testing.draw_marbles`), so a drawn diagram is an executed one.
    """
    return marble_blocks(inspect.cleandoc(doc).splitlines())


def marble_blocks(lines: Sequence[str], *, require_source: bool = True) -> list[list[MarbleRow]]:
    """:func:`docstring_marble_rows` of lines already dedented as :func:`inspect.cleandoc` does
    (a block's lines are still indented by four or more spaces); with ``require_source=False``
    a block needs no ``source:`` line (a picture of any diagram)."""
    blocks: list[list[tuple[str, str, int]]] = []
    current: list[tuple[str, str, int]] = []
    for line in lines:
        match = _LABEL.match(line)
        if match is None:
            if current:
                blocks.append(current)
                current = []
            continue
        rest = match["rest"] or ""
        start = match.end("label") + 1 + len(rest) - len(rest.lstrip())
        current.append((match["label"], line, start))
    if current:
        blocks.append(current)
    found: list[list[MarbleRow]] = []
    for rows in blocks:
        if require_source and not {label for label, _, _ in rows} & {"source", "observable"}:
            continue
        origin = min(start for _, _, start in rows)
        block: list[MarbleRow] = []
        for label, line, start in rows:
            diagram = line[origin:]
            cut = _COMMENT.search(diagram, start - origin + 1)
            comment = diagram[cut.end():].strip() if cut else ""
            block.append(MarbleRow(label, (diagram[:cut.start()] if cut else diagram).rstrip(), comment))
        found.append(block)
    return found


def docstring_marbles(doc: str) -> list[dict[str, str]]:
    """The marble blocks of a docstring as ``{label: diagram}`` (comments cut):
    :func:`docstring_marble_rows` without the comments."""
    return [{row.label: row.diagram for row in rows} for rows in docstring_marble_rows(doc)]
