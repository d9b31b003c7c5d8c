"""MkDocs hooks of the manual (``mkdocs.yml``: ``hooks``): the navigation's Reference section is
filled from :data:`rxpipe._docsite.reference.MODULES` (one page per public module this
installation has), and the reference pages, the marble pictures
(:func:`rxpipe._docsite.reference.reference_pages`) and the changelog (the checkout's
``CHANGELOG.md``) are added to the site's files before the navigation is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

from rxpipe._docsite.reference import modules, reference_pages

__all__ = ["on_config", "on_files"]


def on_config(config: Any, **kwargs: Any) -> Any:
    """The nav's ``Reference`` entry becomes one page per module of :func:`modules`, in order."""
    for entry in config.nav or []:
        if isinstance(entry, dict) and "Reference" in entry:
            entry["Reference"] = [{module.name: f"reference/{module.page}"} for module in modules()]
    return config


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    """Add every generated reference file (Markdown pages and SVG pictures) and the changelog
    to ``files``."""
    for path, content in reference_pages().items():
        files.append(File.generated(config, path, content=content))
    changelog = Path(config.config_file_path).parent / "CHANGELOG.md"
    files.append(File.generated(config, "changelog.md", content=changelog.read_text()))
    return files
