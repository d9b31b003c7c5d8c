"""Each diagram of a public docstring has exactly one runner, in one of the family modules."""

from __future__ import annotations

import importlib
import pkgutil

from . import __path__ as package_path
from .helpers import FOUND

#: every family module's runner keys, as a list: a key in two families would stand twice
RUNNERS = [key for module in pkgutil.iter_modules(package_path) if module.name.startswith("test_")
           and module.name != "test_every_diagram"
           for key in importlib.import_module(f"{__package__}.{module.name}").RUNNERS]


def test_every_docstring_diagram_has_a_runner() -> None:
    assert sorted(FOUND) == sorted(RUNNERS)
