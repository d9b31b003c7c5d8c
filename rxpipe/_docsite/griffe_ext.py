"""A Griffe extension for rxpipe's reference (``mkdocs.yml``: mkdocstrings' ``extensions``).

- The packages the checkout maps into ``rxpipe`` from other folders (``operators/`` installed as
  ``rxpipe.operators``) are loaded from where the installation says they are, so
  ``::: rxpipe.operators.map`` resolves statically (Griffe finds a package's submodules in its
  own folder only; importing the package to inspect it would run ``rxpipe.__main__``).
- Docstrings are written for ``pydoc`` with reStructuredText roles (``:class:`~a.b.C```); the
  manual renders them as Markdown, so a role becomes a code span of the name as shown.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import griffe

__all__ = ["RxpipeDocstrings", "MAPPED", "markdown_roles"]

#: subpackages of ``rxpipe`` that live outside ``rxpipe/`` in the checkout
MAPPED = ("operators",)

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const|term|ref):"
                   r"`(?P<tilde>~?)(?P<target>[^`]+)`")


def markdown_roles(text: str) -> str:
    """``:class:`~rxpipe.settings.Schema``` → ```Schema```, ``:func:`rxpipe.pipe``` →
    ```rxpipe.pipe``` (a ``~`` shows the last part only, as Sphinx does)."""

    def code(match: re.Match[str]) -> str:
        target = match["target"].strip()
        if "<" in target and target.endswith(">"):  # :ref:`text <target>`
            target = target[:target.index("<")].strip()
        return f"`{target.rsplit('.', 1)[-1] if match['tilde'] else target}`"

    return _ROLE.sub(code, text)


class RxpipeDocstrings(griffe.Extension):
    """Loads :data:`MAPPED` into the ``rxpipe`` package and rewrites reST roles as code spans."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "rxpipe":
            return
        for name in MAPPED:
            spec = importlib.util.find_spec(f"rxpipe.{name}")
            if spec is None or spec.origin is None or name in pkg.members:
                continue
            module = loader._load_module(name, Path(spec.origin), submodules=True, parent=pkg)  # noqa: SLF001
            pkg.set_member(name, module)
            loader.expand_exports(module)

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_roles(obj.docstring.value)
