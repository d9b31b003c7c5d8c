"""``python -m rxpipe._docsite [ROOT]``: regenerate the manual's committed generated parts, the
settings tables of README.md and docs/ and ``docs/migration.md`` (ROOT: the checkout, default
the current directory). Prints what it rewrote; exit status 0."""

from __future__ import annotations

import sys
from pathlib import Path

from .migration import migration_page
from .operator_table import with_operator_table
from .tables import marked_files, settings_tables


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else ".").resolve()
    for page in marked_files(root):
        path = root / page
        text = path.read_text()
        new = settings_tables(text, root)
        if new != text:
            path.write_text(new)
            print(f"{page}: settings tables regenerated")
    guide = root / "docs" / "guides" / "operators.md"
    if guide.exists():
        text = guide.read_text()
        new = with_operator_table(text)
        if new != text:
            guide.write_text(new)
            print("docs/guides/operators.md: operator table regenerated")
    migration = root / "docs" / "migration.md"
    page_text = migration_page()
    if not migration.exists() or migration.read_text() != page_text:
        migration.write_text(page_text)
        print("docs/migration.md: regenerated")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
