"""The layer rules of docs/architecture.md, read from the code's own imports (every ``import`` and
``from … import``, at module level or inside a function; ``TYPE_CHECKING`` blocks too):

- the core (``rxpipe/*.py`` and ``rxpipe/testing``) imports nothing above it at module level;
- ``rxpipe.serving`` imports the core, ``rxpipe.stage`` and ``rxpipe.operators`` only;
- ``rxpipe.engines``, ``rxpipe.gateway`` and ``rxpipe.transport`` import ``rxpipe.serving`` and the
  core, never each other; ``rxpipe.transport`` imports no broker adapter;
- the adapters (``rxpipe.redis``, ``rxpipe.nats``, ``rxpipe.kafka``) import the transport, serving
  and the core, never the gateway, the engines or each other;
- ``operators`` (the generic vocabulary) imports only the core at module level (the serving names it
  exports are looked up from ``rxpipe.serving`` on first use, PEP 562);
- ``rxpipe._docsite`` (the manual's generator) may import any of them, and nothing imports it;
- no import cycle at module level anywhere, and in the serving domain and the packages above it no
  two modules import each other at all (not inside a function, not for typing: a declared
  protocol stands between them instead);
- no module has more than 600 lines of code (docstrings, comments and blank lines aside).
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: package -> the packages it may import (besides itself and the core)
ALLOWED = {
    "serving": {"operators"},
    "engines": {"serving", "operators"},
    "gateway": {"serving", "operators"},
    "transport": {"serving"},
    "redis": {"transport", "serving"},
    "nats": {"transport", "serving"},
    "kafka": {"transport", "serving"},
    "operators": set(),
    "testing": set(),
    "load": set(),
    # the manual's generator documents every public module: it sits above them all (never imported
    # by the library; mkdocs and ``python -m rxpipe._docsite`` load it)
    "_docsite": {"serving", "engines", "gateway", "transport", "redis", "nats", "kafka", "operators",
                 "testing", "load"},
}
#: package -> packages it may import only inside a function or a TYPE_CHECKING block
LAZY = {"operators": {"serving"}}
#: core modules that may import these packages inside a function (the CLI runs any pipeline)
CORE_LAZY = {"rxpipe.cli": {"engines", "load"}, "rxpipe._combine_sources": {"operators"}}
PACKAGES = set(ALLOWED)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / "rxpipe").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in sorted((ROOT / "operators").glob("*.py")):
        name = "rxpipe.operators" if path.stem == "__init__" else f"rxpipe.operators.{path.stem}"
        found[name] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> list[tuple[str, bool]]:
    """(imported module, at module level) for every import of ``module``."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:  # ``from package import module`` names the module
                sub = f"{target}.{alias.name}"
                found.append((sub if sub in MODULES else target, id(node) in top))
        elif isinstance(node, ast.Import):
            found.extend((alias.name, id(node) in top) for alias in node.names)
    return [(name, level) for name, level in found if name.startswith("rxpipe")]


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else "core"


def test_every_import_follows_the_layer_rules() -> None:
    broken = []
    for module, path in MODULES.items():
        source = _layer(module)
        for target, at_top in _imports(module, path):
            layer = _layer(target)
            if layer in ("core", source):
                continue
            if source == "core":
                if at_top or layer not in CORE_LAZY.get(module, set()):
                    broken.append(f"{module} -> {target} (the core imports nothing above it)")
            elif layer not in ALLOWED[source] and (at_top or layer not in LAZY.get(source, set())):
                allowed = sorted(ALLOWED[source]) or "the core only"
                broken.append(f"{module} -> {target} ({source} may import {allowed})")
    assert broken == []


def test_nothing_imports_the_manuals_generator() -> None:
    importers = sorted(module for module, path in MODULES.items() if _layer(module) != "_docsite"
                       for target, _ in _imports(module, path) if _layer(target) == "_docsite")
    assert importers == []


def test_the_transport_interface_imports_no_adapter_and_loads_no_client_library() -> None:
    import subprocess
    import sys

    code = ("import sys, rxpipe.transport, rxpipe.operators; "
            "print(sorted(m for m in ('redis', 'nats', 'aiokafka', 'rxpipe.redis', 'rxpipe.nats', 'rxpipe.kafka', "
            "'rxpipe.serving', 'aiohttp.web') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    # rxpipe.transport needs the records (serving); neither loads a broker client nor the HTTP server
    assert out.split() == ["['rxpipe.serving']"]


def test_no_module_imports_another_that_imports_it_back_at_module_level() -> None:
    edges = {module: {target for target, at_top in _imports(module, path) if at_top and target in MODULES}
             for module, path in MODULES.items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            here = todo.pop()
            if here == goal:
                return True
            if here not in seen:
                seen.add(here)
                # a package's __init__ runs its imports before its submodules': a submodule importing
                # its own package is not a cycle through the module graph
                todo.extend(t for t in edges.get(here, ()) if not here.startswith(t + "."))
        return False

    cycles = sorted({tuple(sorted((a, b))) for a, targets in edges.items() for b in targets
                     if a != b and not a.startswith(b + ".") and not b.startswith(a + ".") and reaches(b, a)})
    assert cycles == []


#: packages where no two modules may import each other, whatever the import's place
STRICT = ("rxpipe.serving", "rxpipe.gateway", "rxpipe.transport", "rxpipe.engines", "rxpipe.redis", "rxpipe.nats",
          "rxpipe.kafka")


def test_no_two_modules_of_the_serving_layers_import_each_other() -> None:
    edges = {module: {target for target, _ in _imports(module, path) if target in MODULES}
             for module, path in MODULES.items() if module.startswith(STRICT)}
    mutual = sorted({tuple(sorted((a, b))) for a, targets in edges.items() for b in targets
                     if a != b and a in edges.get(b, ()) and not a.startswith(b + ".") and not b.startswith(a + ".")})
    assert mutual == []


def _code_lines(path: Path) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    source = path.read_text()
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                doc_lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    code: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.ENDMARKER):
            code.update(line for line in range(token.start[0], token.end[0] + 1) if line not in doc_lines)
    return len(code)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_over_600_lines_of_code(module: str) -> None:
    assert _code_lines(MODULES[module]) <= 600
