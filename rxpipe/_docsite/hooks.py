"""MkDocs hooks of the manual (``mkdocs.yml``: ``hooks``): the reference pages and the marble
pictures (:func:`rxpipe._docsite.reference.reference_pages`) and the changelog (the checkout's
``CHANGELOG.md``) are added to the site's files before the navigation is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from rxpipe._docsite.reference import reference_pages

__all__ = ["on_files"]


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    """Add every generated reference file (Markdown pages and SVG pictures) and the changelog
    to ``files``."""
    for path, content in reference_pages().items():
        files.append(File.generated(config, path, content=content))
    changelog = Path(config.config_file_path).parent / "CHANGELOG.md"
    files.append(File.generated(config, "changelog.md", content=changelog.read_text()))
    return files
