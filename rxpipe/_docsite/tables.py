"""The settings tables of the manual, generated from the pipelines' ``SETTINGS`` (:mod:`rxpipe.settings`).

    python -m rxpipe._docsite          # regenerate every marked table (and the migration page)

A table is marked ``<!-- settings: pipelines/x.py -->`` ... ``<!-- /settings -->`` in a page of
``docs/`` (the file's path relative to the checkout's root); ``tests/test_settings.py`` fails
while a marked table differs from its pipeline's schema.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..loader import load_module

__all__ = ["MARKER", "settings_tables", "marked_files"]

#: a marked table: ``<!-- settings: FILE -->`` + the table + ``<!-- /settings -->``
MARKER = re.compile(r"(<!-- settings: (?P<file>[\w./-]+) -->\n)(?P<table>.*?)(<!-- /settings -->)", re.S)


def settings_tables(text: str, root: Path) -> str:
    """``text`` with every marked table regenerated from its pipeline file's ``SETTINGS`` (the
    file's path relative to ``root``, the checkout)."""

    def table(match: re.Match[str]) -> str:
        module, _ = load_module(str(root / match.group("file")))
        return match.group(1) + module.SETTINGS.table("markdown") + match.group(4)

    return MARKER.sub(table, text)


def marked_files(root: Path) -> dict[str, list[str]]:
    """The pages of ``root/docs`` (and README.md) holding marked tables: page → the pipeline
    files of its tables, in order."""
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    found = {}
    for page in pages:
        if page.is_file():
            files = [m.group("file") for m in MARKER.finditer(page.read_text())]
            if files:
                found[str(page.relative_to(root))] = files
    return found
