"""The API reference: one page per public module, an entry for every name of its ``__all__``,
and above each documented callable its marble diagrams, drawn from its docstring.

The pages are Markdown for mkdocstrings (``::: rxpipe.operators.map``), generated while the
site builds (:mod:`rxpipe._docsite.hooks`), so a new public name or a new operator is in the
manual without anyone writing its page: its docstring is the entry, its docstring diagram the
picture (the block ``tests/docstring_marbles/`` plays).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..testing import draw_marbles
from ..testing._marble_parse import docstring_marble_rows

__all__ = ["Module", "MODULES", "modules", "entries", "marble_pictures", "picture_path", "page", "reference_pages",
           "signature", "summary"]


@dataclass(frozen=True)
class Module:
    """A reference page: ``page`` (its file under ``reference/``), the module, its title."""

    page: str
    name: str
    title: str


#: the reference pages, in the order of the manual's navigation (its Reference section is made
#: from this list); a module this installation has not got (yet) is left out
MODULES = (
    Module("rxpipe.md", "rxpipe", "Flowable, sources, protocol, errors"),
    Module("operators.md", "rxpipe.operators", "Operators"),
    Module("stage.md", "rxpipe.stage", "Writing a stage"),
    Module("testing.md", "rxpipe.testing", "The test kit"),
    Module("serving.md", "rxpipe.serving", "The serving domain"),
    Module("engines.md", "rxpipe.engines", "Engines"),
    Module("gateway.md", "rxpipe.gateway", "The gateway"),
    Module("transport.md", "rxpipe.transport", "Transport across hosts"),
    Module("redis.md", "rxpipe.redis", "Redis Streams"),
    Module("nats.md", "rxpipe.nats", "NATS JetStream"),
    Module("kafka.md", "rxpipe.kafka", "Kafka"),
    Module("runtime.md", "rxpipe.runtime", "Running a pipeline"),
    Module("view.md", "rxpipe.view", "The live pipeline view"),
    Module("loader.md", "rxpipe.loader", "Pipeline files"),
    Module("settings.md", "rxpipe.settings", "Settings"),
)


def modules() -> list[Module]:
    """The pages of the modules this installation has (``rxpipe.serving`` once it exists; an
    adapter added to :data:`MODULES` appears when its package does)."""
    return [m for m in MODULES if importlib.util.find_spec(m.name) is not None]


def _module(name: str) -> ModuleType:
    return importlib.import_module(name)


def entries(module: Module) -> list[str]:
    """The names of ``module``'s page: its ``__all__``, in its order."""
    return list(getattr(_module(module.name), "__all__", []))


def summary(obj: Any) -> str:
    """The first sentence of ``obj``'s docstring, on one line (its summary in a page's table)."""
    doc = inspect.getdoc(obj) or ""
    first = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    cut = first.find(". ")
    first = first if cut == -1 else first[:cut + 1]
    return first.replace("|", "\\|")


def _own_doc(obj: Any) -> str | None:
    """The docstring written for ``obj`` itself (not one inherited from its type)."""
    if inspect.isclass(obj) or inspect.isroutine(obj) or callable(obj):
        return obj.__doc__ if isinstance(obj.__doc__, str) else None
    return None


def marble_pictures(module: Module) -> dict[str, list[str]]:
    """SVG pictures of the marble diagrams in the docstrings of ``module``'s names, by name
    (names without a diagram are absent); one picture per docstring block."""
    found: dict[str, list[str]] = {}
    mod = _module(module.name)
    for name in entries(module):
        doc = _own_doc(getattr(mod, name))
        blocks = docstring_marble_rows(doc) if doc else []
        if blocks:
            found[name] = [draw_marbles(rows, title=f"{module.name}.{name}: marble diagram {k + 1}")
                           for k, rows in enumerate(blocks)]
    return found


def picture_path(module: Module, name: str, k: int) -> str:
    """Where the ``k``-th picture of ``name`` lies in the site (relative to the docs root)."""
    return f"reference/marbles/{module.name}.{name}-{k}.svg"


def signature(name: str, obj: Any) -> str | None:
    """``name(params) -> result`` of a callable as its annotations are written (strings under
    ``from __future__ import annotations``, shown without quotes); None for a value or where
    Python cannot tell (a builtin)."""
    if not callable(obj):
        return None
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None

    def shown(annotation: Any) -> str:
        return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)

    params = []
    for param in sig.parameters.values():
        annotation = param.annotation
        params.append(param.replace(annotation=inspect.Parameter.empty if annotation is inspect.Parameter.empty
                                    else _Shown(shown(annotation))))
    returns = sig.return_annotation
    text = str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))
    if returns is not inspect.Signature.empty and not inspect.isclass(obj):
        text += f" -> {shown(returns)}"
    return f"{name}{text}"


class _Shown:
    """An annotation that prints as written (``inspect`` shows a string annotation quoted)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


_OBJECT = """::: {path}
    options:
      show_root_heading: false
      show_root_toc_entry: false
      heading_level: 3
"""


def page(module: Module) -> str:
    """The Markdown of ``module``'s reference page."""
    mod = _module(module.name)
    pictures = marble_pictures(module)
    lines = [f"# `{module.name}`: {module.title}", "",
             f"::: {module.name}", "    options:", "      members: false", "      show_root_heading: false",
             "      show_root_toc_entry: false", "",
             "| name | what it is |", "|---|---|"]
    names = entries(module)
    for name in names:
        lines.append(f"| [`{name}`](#{module.name}.{name}) | {summary(getattr(mod, name))} |")
    lines.append("")
    for name in names:
        lines += [f"## `{name}` {{ #{module.name}.{name} }}", ""]
        shown = signature(name, getattr(mod, name))
        if shown is not None:
            lines += ["```python", shown, "```", ""]
        for k, _ in enumerate(pictures.get(name, [])):
            lines += [f'![{name}: marble diagram {k + 1}](marbles/{module.name}.{name}-{k}.svg){{ .marble }}', ""]
        lines += [_OBJECT.format(path=f"{module.name}.{name}"), ""]
    return "\n".join(lines)


def reference_pages() -> dict[str, str]:
    """Every generated file of the reference, by its path relative to the docs root: the pages
    (Markdown) and the marble pictures (SVG)."""
    files: dict[str, str] = {}
    for module in modules():
        files[f"reference/{module.page}"] = page(module)
        for name, svgs in marble_pictures(module).items():
            for k, svg in enumerate(svgs):
                files[picture_path(module, name, k)] = svg
    return files
