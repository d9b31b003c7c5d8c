"""``--plot``: the PNG's size, and the README's figure."""

from __future__ import annotations

import builtins
import re
import struct
from pathlib import Path
from typing import Any

import pytest

from rxpipe.load import FIGURE_PX, INSTALL_HINT, Attempt, PlotUnavailable, RequestRecord, per_second, summarize
from rxpipe.load import write_plot as draw

ROOT = Path(__file__).resolve().parents[2]


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR"
    width, height = struct.unpack(">II", header[16:24])
    return int(width), int(height)


def figures() -> dict[str, Any]:
    records = [RequestRecord(i, i * 0.5, [Attempt(i * 0.5, "2xx" if i % 3 else "429", 200, 0.2)], i * 0.5 + 0.2,
                             None, [], 0.2 if i % 3 else None, 1, 4) for i in range(8)]
    result = summarize(records, 4.0)
    result["series"] = per_second(records, 4, [(1.0, 2.0)] * 4)
    result["config"] = {"rate": [2.0, 2.0], "duration": 4.0}
    return result


def test_the_plot_is_a_png_of_the_expected_size(tmp_path: Path) -> None:
    draw(figures(), tmp_path / "p.png")
    assert png_size(tmp_path / "p.png") == FIGURE_PX == (1200, 900)


def test_without_matplotlib_the_error_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def blocked(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.split(".")[0] == "matplotlib":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", blocked)
    hint = re.escape("pip install matplotlib (or, in the rxpipe checkout: pip install -e '.[plot]')")
    with pytest.raises(PlotUnavailable, match=hint):
        draw(figures(), tmp_path / "p.png")
    assert not (tmp_path / "p.png").exists() and "pip install" in INSTALL_HINT


def test_the_readme_shows_the_committed_figure() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "](docs/seed_petproject_load.png)" in readme
    assert png_size(ROOT / "docs" / "seed_petproject_load.png") == FIGURE_PX
