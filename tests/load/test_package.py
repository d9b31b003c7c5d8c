"""rxpipe.load's public names load lazily, so `rxpipe run` does not import the load tool's modules."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rxpipe.load as load


def test_every_public_name_resolves_and_unknown_names_raise() -> None:
    assert sorted(load._WHERE) == sorted(load.__all__)
    for name in load.__all__:
        assert getattr(load, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        load.nope  # noqa: B018


def test_the_cli_registers_load_without_importing_its_modules() -> None:
    code = ("import sys, rxpipe.cli; assert 'load' in rxpipe.cli.main.commands; "
            "print(sorted(m for m in sys.modules if m.startswith(('hdrh', 'rxpipe.load._r', 'rxpipe.load._s'))))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout) == (0, "[]\n"), run.stderr
