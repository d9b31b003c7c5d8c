"""``rxpipe.operators`` is a lazy facade (DESIGN §3, "Operators, third round"): each public name
lives in its family's module, which is imported the first time one of its names is used.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from rxpipe import operators as ops

INIT = Path(ops.__file__)


def _type_checking_imports() -> dict[str, set[str]]:
    """module -> names, from the ``if TYPE_CHECKING:`` block of ``operators/__init__.py``."""
    tree = ast.parse(INIT.read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    found: dict[str, set[str]] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        module = "." * node.level + (node.module or "")
        found.setdefault(module, set()).update(alias.name for alias in node.names)
    return found


def test_the_type_checkers_view_is_the_mapping_that_runs() -> None:
    mapping: dict[str, set[str]] = {}
    for module, names in ops._FAMILIES.items():
        mapping.setdefault(module, set()).update(names)
    assert _type_checking_imports() == mapping


def test_all_is_every_mapped_name_once() -> None:
    assert len(ops.__all__) == len(set(ops.__all__)) == sum(len(names) for names in ops._FAMILIES.values())


@pytest.mark.parametrize("name", sorted(ops.__all__))
def test_each_name_is_its_family_modules_object(name: str) -> None:
    module = ops._MODULE_OF[name]
    home = importlib.import_module(module, ops.__name__) if module.startswith(".") else importlib.import_module(module)
    assert getattr(ops, name) is getattr(home, name)
    assert name in home.__all__
    assert name in dir(ops)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'mapp'"):
        ops.mapp  # noqa: B018


def test_importing_the_facade_loads_no_family_and_first_use_loads_one() -> None:
    code = ("import sys, rxpipe.operators as ops\n"
            "def loaded(): return sorted(m for m in sys.modules if m.startswith('rxpipe.operators.'))\n"
            "print(loaded()); ops.map; print(loaded())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=60).stdout.splitlines()
    assert out[0] == "[]"
    assert "'rxpipe.operators._transforming'" in out[1] and "'rxpipe.operators._timing'" not in out[1]
