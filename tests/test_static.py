"""Static checks as part of the test run: the type checker and the linter on the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run(tmp_path: Path, *args: str) -> tuple[int, str]:
    out = tmp_path / "out.txt"
    with out.open("wb") as stdout:
        code = subprocess.run(args, cwd=ROOT, stdout=stdout, stderr=subprocess.STDOUT, timeout=300).returncode
    return code, out.read_text()


@pytest.mark.timeout(300)
def test_mypy_is_clean(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is part of the test extra")
    code, output = run(tmp_path, sys.executable, "-m", "mypy", "rxpipe", "operators",
                       "--cache-dir", str(tmp_path / "mypy-cache"))
    assert code == 0, output


def test_ruff_is_clean(tmp_path: Path) -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.fail("ruff is part of the test extra")
    code, output = run(tmp_path, ruff, "check", "rxpipe", "operators", "pipelines", "tests", "bench")
    assert code == 0, output
