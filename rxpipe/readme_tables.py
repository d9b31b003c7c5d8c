"""README.md's settings tables, generated from the pipelines' ``SETTINGS`` (:mod:`rxpipe.settings`).

    python -m rxpipe.readme_tables README.md      # regenerate every marked table in place

A table is marked ``<!-- settings: pipelines/x.py -->`` ... ``<!-- /settings -->``;
``tests/test_settings.py`` fails while a marked table differs from its pipeline's schema.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from .loader import load_module

__all__ = ["MARKER", "readme_tables", "main"]

#: a marked table: ``<!-- settings: FILE -->`` + the table + ``<!-- /settings -->``
MARKER = re.compile(r"(<!-- settings: (?P<file>[\w./-]+) -->\n)(?P<table>.*?)(<!-- /settings -->)", re.S)


def readme_tables(text: str, root: Path) -> str:
    """``text`` with every marked table regenerated from its pipeline file's ``SETTINGS`` (the
    file's path relative to ``root``)."""

    def table(match: re.Match[str]) -> str:
        module, _ = load_module(str(root / match.group("file")))
        return match.group(1) + module.SETTINGS.table("markdown") + match.group(4)

    return MARKER.sub(table, text)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m rxpipe.readme_tables README.md", file=sys.stderr)
        return 2
    path = Path(args[0])
    text = path.read_text()
    new = readme_tables(text, path.resolve().parent)
    if new != text:
        path.write_text(new)
        print(f"{path}: settings tables regenerated")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
