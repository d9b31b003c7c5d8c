"""Loading pipeline files (``rxpipe run FILE[:NAME]``) and ``--set key=value`` configuration.

A pipeline is named by its path (``pipelines/llm_gateway.py``) or, for the pipelines shipped with
rxpipe (the package :mod:`rxpipe.pipelines`, the checkout's ``pipelines/`` folder), by its bare
name from any directory: ``rxpipe run llm_gateway``, ``load_pipeline("llm_gateway")``.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import inspect
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from .flowable import Flowable
from .runtime import Pipeline

__all__ = ["PipelineLoadError", "parse_settings", "split_spec", "resolve_spec", "shipped_pipelines", "load_pipeline",
           "load_module", "build_pipeline", "locate_error", "PIPELINES_PACKAGE"]

#: the package the shipped pipeline files are installed as (the checkout's ``pipelines/``)
PIPELINES_PACKAGE = "rxpipe.pipelines"


class PipelineLoadError(Exception):
    """The pipeline file could not be loaded or did not define a usable ``pipeline``."""


def parse_settings(pairs: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["a=1", "b=x", "c=[1,2]"]`` → ``{"a": 1, "b": "x", "c": [1, 2]}``.

    Each value is parsed as JSON, and taken as a plain string when it is not JSON.
    Raises PipelineLoadError for a pair without ``=`` or with an empty key.
    """
    config: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise PipelineLoadError(f"--set expects key=value, got {pair!r}")
        try:
            config[key] = orjson.loads(raw)
        except orjson.JSONDecodeError:
            config[key] = raw
    return config


def split_spec(spec: str) -> tuple[Path, str]:
    """``"file.py:name"`` → ``(Path("file.py"), "name")``; without ``:NAME`` the name is ``pipeline``."""
    path, sep, name = spec.rpartition(":")
    # "C:\\x.py" or a path without ":NAME"
    if not sep or not name.isidentifier() or not path:
        return Path(spec), "pipeline"
    return Path(path), name


def shipped_pipelines() -> dict[str, Path]:
    """The pipelines shipped with rxpipe, by name: ``{"hello": Path(".../hello.py"), ...}``
    (the modules of :data:`PIPELINES_PACKAGE`, sorted; ``rxpipe run NAME`` runs one)."""
    folder = importlib.resources.files(PIPELINES_PACKAGE)
    found = {entry.name[:-3]: Path(str(entry)) for entry in folder.iterdir()
             if entry.name.endswith(".py") and not entry.name.startswith("_")}
    return dict(sorted(found.items()))


def _shipped(name: str) -> bool:
    return name.isidentifier() and name in shipped_pipelines()


def resolve_spec(spec: str) -> tuple[Path, str]:
    """``FILE[:NAME]`` → (the pipeline file, NAME): :func:`split_spec`, where FILE is a path as
    given when it exists, else a bare name (``llm_gateway``: no directory, no ``.py``) of a
    :func:`shipped_pipelines` file, found from any directory. Anything else is returned as given
    (loading it then says that no such file exists)."""
    path, name = split_spec(spec)
    if not path.exists() and len(path.parts) == 1 and not path.suffix and _shipped(str(path)):
        return shipped_pipelines()[str(path)], name
    return path, name


def _missing(path: Path) -> PipelineLoadError:
    shipped = shipped_pipelines()
    if path.stem in shipped:
        hint = f"; rxpipe ships {path.stem}: rxpipe run {path.stem} finds it from any directory"
    elif len(path.parts) == 1 and not path.suffix:
        hint = f"; the pipelines shipped with rxpipe: {', '.join(shipped)}"
    else:
        hint = ""
    return PipelineLoadError(f"{path}: no such pipeline file{hint}")


def _import_file(path: Path, *, shipped: bool = False) -> ModuleType:
    if not path.is_file():
        raise _missing(path)
    module_name = f"rxpipe_pipeline_{path.stem}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PipelineLoadError(f"{path}: cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    # As `python FILE` does: the file's directory comes first on sys.path, so a pipeline file
    # imports the modules beside it (an operator of its own, the manual's pairs.py). Not for a
    # shipped one: they import only rxpipe, and their folder's names must not shadow the user's.
    directory = str(path.resolve().parent)
    if not shipped and directory not in sys.path:
        sys.path.insert(0, directory)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def load_pipeline(spec: str, config: dict[str, Any] | None = None) -> Pipeline:
    """Load ``FILE[:NAME]`` (NAME defaults to ``pipeline``) and build the Pipeline. FILE is a
    path, or the bare name of a pipeline shipped with rxpipe (``"llm_gateway"``:
    :func:`resolve_spec`), from any directory.

    The attribute may be a :class:`Pipeline`, a Flowable, or a factory called with the config
    dict (``def pipeline(config: dict)``) returning either. The file's directory is put first on
    ``sys.path`` (as ``python FILE`` does), so it can import the modules beside it. Exceptions
    raised while importing the file or running the factory propagate (use :func:`locate_error`
    to report them);
    a missing or unusable attribute raises PipelineLoadError.
    """
    module, name = load_module(spec)
    return build_pipeline(module, name, config, path=resolve_spec(spec)[0])


def load_module(spec: str) -> tuple[ModuleType, str]:
    """Import the file of ``FILE[:NAME]`` (a path, or a shipped pipeline's name:
    :func:`resolve_spec`); return the module and NAME (default ``pipeline``).
    Raises PipelineLoadError for a missing file or one without that attribute."""
    path, name = resolve_spec(spec)
    module = _import_file(path, shipped=path != split_spec(spec)[0])
    if not hasattr(module, name):
        raise PipelineLoadError(f"{path}: defines no {name!r} (a Pipeline, a Flowable, or a "
                                f"factory taking a config dict)")
    return module, name


def build_pipeline(module: ModuleType, name: str, config: dict[str, Any] | None = None, *,
                   path: Path | str | None = None) -> Pipeline:
    """The Pipeline of attribute ``name`` of a module :func:`load_module` imported (see
    :func:`load_pipeline`); ``path`` is the file as the user named it (for messages)."""
    path = path if path is not None else getattr(module, "__file__", None) or module.__name__
    obj = getattr(module, name)
    config = dict(config or {})
    if isinstance(obj, (Pipeline, Flowable)):
        if config:
            raise PipelineLoadError(f"{path}: {name!r} is not a factory, so it takes no --set "
                                    f"settings (got {', '.join(sorted(config))})")
    elif callable(obj):
        params = inspect.signature(obj).parameters
        obj = obj(config) if params else obj()
        if not params and config:
            raise PipelineLoadError(f"{path}: {name}() takes no config, but --set gave "
                                    f"{', '.join(sorted(config))}")
    if not isinstance(obj, (Pipeline, Flowable)):
        raise PipelineLoadError(f"{path}: {name!r} is {obj!r}, not a Pipeline, a Flowable or a "
                                f"factory returning one")
    return Pipeline.of(obj)


def locate_error(error: BaseException, path: str | None = None) -> str:
    """A one-line location for ``error``: ``file:line in function``.

    Prefers the innermost frame inside ``path`` (the pipeline file), then the innermost frame
    outside rxpipe itself, then the innermost frame. Syntax errors name their own line.
    """
    if isinstance(error, SyntaxError) and error.filename:
        return f"{_rel(error.filename)}:{error.lineno}"
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "<unknown location>"
    package_dir = os.path.dirname(os.path.abspath(__file__))
    chosen = frames[-1]
    if path is not None:
        target = os.path.abspath(path)
        inside = [f for f in frames if os.path.abspath(f.filename) == target]
        if inside:
            chosen = inside[-1]
        else:
            outside = [f for f in frames if not os.path.abspath(f.filename).startswith(package_dir)]
            if outside:
                chosen = outside[-1]
    return f"{_rel(chosen.filename)}:{chosen.lineno} in {chosen.name}"


def _rel(filename: str) -> str:
    try:
        rel = os.path.relpath(filename)
    except ValueError:
        return filename
    return filename if rel.startswith("..") else rel
