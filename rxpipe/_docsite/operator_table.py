"""The operator table of ``docs/guides/operators.md``: every name of ``rxpipe.operators.__all__``,
by family module (the facade's ``_FAMILIES``, reactivex's layout), with the first sentence of its
docstring. ``python -m rxpipe._docsite`` rewrites the part between the markers;
``tests/test_docs.py`` fails while it differs from :func:`operator_table`."""

from __future__ import annotations

import re

__all__ = ["BEGIN", "END", "operator_table", "with_operator_table"]

BEGIN = "<!-- operators: generated from rxpipe.operators.__all__ by `python -m rxpipe._docsite` -->"
END = "<!-- /operators -->"


def _summary(doc: str | None) -> str:
    """The docstring's first sentence, on one line, with table pipes escaped."""
    text = " ".join((doc or "").strip().split("\n\n")[0].split())
    match = re.match(r"(.+?\.)(\s|$)", text)
    return (match.group(1) if match else text).rstrip(":").replace("|", "\\|")


def operator_table() -> str:
    """The Markdown table (one row per public name: family, name, summary)."""
    from rxpipe import operators as ops

    lines = ["| family | name | what it does |", "|---|---|---|"]
    for module, names in ops._FAMILIES.items():
        family = module.lstrip(".").lstrip("_") if module.startswith(".") else module
        for name in names:
            lines.append(f"| {family} | `{name}` | {_summary(getattr(ops, name).__doc__)} |")
    return "\n".join(lines)


def with_operator_table(text: str) -> str:
    """``text`` with the part between :data:`BEGIN` and :data:`END` regenerated (unchanged when it
    has no markers)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        return text
    return text[:start + len(BEGIN)] + "\n" + operator_table() + "\n" + text[end:]
