"""The ``rxpipe`` command line: ``rxpipe run FILE[:NAME]``, ``rxpipe graph FILE[:NAME]`` and
``rxpipe load [BASE_URL]`` (the load generator, :mod:`rxpipe.load`)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import re
import signal
import sys
import time
import traceback
from types import ModuleType
from typing import Any, Callable

import click

from .errors import StartError
from .loader import PipelineLoadError, build_pipeline, load_module, locate_error, parse_settings, resolve_spec
from .logs import LOG_FORMATS, LOG_LEVELS, configure_logging, event, public_url
from .runtime import Pipeline, walk
from .settings import Schema, SettingError

__all__ = ["main"]

log = logging.getLogger("rxpipe")


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def _fail(error: BaseException, spec: str, show_traceback: bool) -> None:
    path = str(resolve_spec(spec)[0])
    if show_traceback:
        traceback.print_exception(error, file=sys.stderr)
    if isinstance(error, (PipelineLoadError, StartError)) or (isinstance(error, SettingError) and error.key):
        click.echo(f"rxpipe: error: {error}", err=True)
    else:
        where = locate_error(error, path)
        message = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        click.echo(f"rxpipe: error: {message}\n  at {where}", err=True)
    sys.exit(1)


def _load(spec: str, settings: tuple[str, ...], show_traceback: bool) -> tuple[ModuleType, Pipeline, dict[str, Any]]:
    """The pipeline file's module, its Pipeline and the parsed ``--set`` values; on error, one
    line (and the location) on stderr and exit status 1."""
    try:
        config = parse_settings(settings)
        module, name = load_module(spec)
        return module, build_pipeline(module, name, config, path=resolve_spec(spec)[0]), config
    except Exception as error:
        _fail(error, spec, show_traceback)
        raise  # unreachable


def _print_item(item: Any) -> None:
    sys.stdout.write(f"{item}\n")


#: the youngest generation's collection threshold while ``rxpipe run`` serves (net allocations of
#: GC-tracked objects; CPython's default is 700)
GC_THRESHOLD = 10_000


def _tune_gc() -> None:
    """Once the pipeline runs: move every object made so far (modules, the graph, the app) to the
    permanent generation (``gc.freeze``), so full collections stop walking them, and collect the
    youngest generation every :data:`GC_THRESHOLD` net allocations instead of 700. The serving
    path frees an answered request by reference counting (no cycles:
    ``tests/gateway/test_no_cycles.py``), so a collection finds next to nothing; with CPython's
    defaults they took ~7 % of a busy gateway's CPU (~4 us per request)."""
    gc.freeze()
    youngest, middle, oldest = gc.get_threshold()
    gc.set_threshold(max(youngest, GC_THRESHOLD), middle, oldest)


async def _serve(pipeline: Pipeline, host: str, port: int, start_fields: dict[str, Any] | None = None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():  # a second signal: stop waiting for in-flight work
            event(log, logging.WARNING, f"{name} again: stopping now (in-flight work is cancelled)", signal=name)
            for service in pipeline.services:
                service.abort()
        else:
            event(log, logging.INFO, f"{name}: draining in-flight work (drain_timeout_s="
                  f"{pipeline.drain_timeout_s:g}; a second signal stops at once)", signal=name,
                  drain_timeout_s=pipeline.drain_timeout_s)
        stop.set()

    def on_hangup() -> None:
        # SIGHUP's default action ends the process (exit 129): here it reloads what can be reloaded
        if not [service for service in pipeline.services if service.reload()]:
            event(log, logging.INFO, "SIGHUP: nothing to reload (no tenants_file); ignored", signal="SIGHUP")

    for service in pipeline.services:
        if hasattr(service, "handle_sighup"):
            service.handle_sighup = False  # this handler calls its reload()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    loop.add_signal_handler(signal.SIGHUP, on_hangup)
    try:
        on_item = None if pipeline.serves_http else _print_item
        async with pipeline.start(host=host, port=port, on_item=on_item) as running:
            if pipeline.serves_http:
                _tune_gc()  # the serving path's cycles are known to be cut; a user's graph's are not
            if running.url is not None:
                _log_start(pipeline, running.url, start_fields or {})
            assert running.task is not None
            stopper = loop.create_task(stop.wait())
            await asyncio.wait({running.task, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if running.task.done():
                await running.wait()  # raises the pipeline's error
            stopping = time.monotonic()
        if running.url is not None:
            event(log, logging.INFO, f"{pipeline.name} stopped ({time.monotonic() - stopping:.1f} s to drain)",
                  pipeline=pipeline.name)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        sys.stdout.flush()


def _log_start(pipeline: Pipeline, url: str, fields: dict[str, Any]) -> None:
    """The one start line: URL, pipeline, engines, whether auth is on (how many keys, never a
    key), metrics port, settings that differ from the defaults (a secret shown as ``(hidden)``:
    :meth:`~rxpipe.settings.Schema.changed`)."""
    engines = describe_engines(pipeline)
    parts = [f"{pipeline.name} serving on {url}"]
    if engines:
        parts.append("engines: " + ", ".join(engines))
    keys = sum(getattr(service, "auth_keys", 0) for service in pipeline.services)
    if keys:
        parts.append(f"auth on ({keys} key{'s' if keys != 1 else ''})")
    if fields.get("metrics_port") is not None:
        parts.append(f"metrics port {fields['metrics_port']}")
    settings = fields.get("settings") or {}
    if settings:
        parts.append("settings: " + " ".join(f"{k}={_shown(v)}" for k, v in settings.items()))
    event(log, logging.INFO, "; ".join(parts), pipeline=pipeline.name, url=url, engines=engines, auth_keys=keys,
          metrics_port=fields.get("metrics_port"), settings=settings)
    every = fields.get("all_settings")
    if every:
        event(log, logging.DEBUG, "settings in force: " + " ".join(f"{k}={_shown(v)}" for k, v in every.items()),
              settings=every)


def _shown(value: Any) -> str:
    import orjson

    return value if isinstance(value, str) and value and " " not in value else orjson.dumps(value).decode()


def describe_engines(pipeline: Pipeline) -> list[str]:
    """``name (Kind at public URL)`` of every engine and broker behind ``pipeline`` (replicas of a
    ``balance`` one by one); URLs without their credentials."""
    from .engines import Engine

    shown: list[str] = []
    for stage in pipeline.stages:
        engine = getattr(stage, "engine", None)
        engines = getattr(engine, "engines", None) if engine is not None else None
        for e in (engines if engines is not None else [engine] if engine is not None else []):
            if not isinstance(e, Engine):
                continue
            where = getattr(e, "base_url", None)
            kind = type(e).__name__
            shown.append(f"{e.name} ({kind}{' at ' + public_url(where) if where else ''})")
        settings = getattr(stage, "settings", None)
        url = getattr(settings, "url", None)
        if isinstance(url, str):
            shown.append(f"{stage.name} ({stage.kind} at {public_url(url)})")
    return shown


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rxpipe")
def main() -> None:
    """rxpipe: reactive-streams pipelines for LLM serving, with backpressure by construction.

    Run a pipeline file with `rxpipe run FILE`; see `rxpipe run --help`.
    """


@main.command()
@click.argument("spec", metavar="FILE[:NAME]")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE",
              help="Configuration for a pipeline factory; VALUE is parsed as JSON, else a string. "
                   "Repeatable; --help-settings lists the keys.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address of the HTTP edge.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Port of the HTTP edge (0 picks a free one).")
@click.option("--loop", "loop_name", type=click.Choice(["uvloop", "asyncio"]), default="uvloop",
              show_default=True, help="Event loop implementation.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Also serve Prometheus metrics on this port (the HTTP edge serves /metrics anyway).")
@click.option("--log-level", type=click.Choice(LOG_LEVELS), default="info", show_default=True,
              help="Least severe log records written to stderr.")
@click.option("--log-format", type=click.Choice(LOG_FORMATS), default="text", show_default=True,
              help="text: one readable line per record; json: one JSON object per line.")
@click.option("--access-log", is_flag=True,
              help="Log one line per completion request (status, tokens, queue and total time, tenant; "
                   "never a key or a prompt).")
@click.option("--help-settings", "help_settings", is_flag=True,
              help="Print the pipeline's settings (name, type, default, meaning) and exit.")
@click.option("--traceback", "show_traceback", is_flag=True, help="Print full tracebacks on error.")
def run(spec: str, settings: tuple[str, ...], host: str, port: int, loop_name: str,
        metrics_port: int | None, log_level: str, log_format: str, access_log: bool, help_settings: bool,
        show_traceback: bool) -> None:
    """Run the pipeline defined in FILE (attribute NAME, default `pipeline`).

    FILE is a path, or the name of a pipeline shipped with rxpipe, found from any directory:
    hello, llm_gateway, llm_router, llm_worker, llm_gateway_redis, embed_documents,
    seed_petproject. The attribute is a rxpipe.Pipeline, a Flowable, or a factory `def pipeline(config: dict)`
    that receives the --set values. A pipeline with an HTTP edge is served on --host/--port
    until SIGINT/SIGTERM, then drained; any other pipeline's items are printed one per line
    until it completes (a reader that closes the pipe, as `| head` does, stops it quietly). Exit
    status: 0 on completion or a requested stop, 1 on error (with the file and line that raised).

    \b
    Examples:
      rxpipe run hello
      rxpipe run llm_gateway --port 8000 --set queue_capacity=20
      rxpipe run llm_gateway --log-format json --access-log
      rxpipe run ./my_pipeline.py:evens
    """
    if help_settings:
        _print_settings(spec, show_traceback)
        return
    configure_logging(log_level, log_format)
    module, pipeline, config = _load(spec, settings, show_traceback)
    if access_log:
        for service in pipeline.services:
            if hasattr(service, "access_log"):
                service.access_log = True
    schema = _schema_of(module)
    fields: dict[str, Any] = {"metrics_port": metrics_port, "settings": {}, "all_settings": {}}
    if schema is not None:
        fields["settings"] = schema.changed(config)
        fields["all_settings"] = schema.shown(schema.resolve(config))
    try:
        if metrics_port is not None:
            from prometheus_client import start_http_server

            try:
                start_http_server(metrics_port, addr=host)
            except OSError as error:
                raise StartError(f"cannot serve metrics on {host}:{metrics_port}: {error.strerror or error}; "
                                 f"pick another --metrics-port") from error
        with asyncio.Runner(loop_factory=_loop_factory(loop_name)) as runner:
            runner.run(_serve(pipeline, host, port, fields))
    except BrokenPipeError:
        _stdout_closed()
    except Exception as error:
        _fail(error, spec, show_traceback)
    except KeyboardInterrupt:
        sys.exit(130)


def _stdout_closed() -> None:
    """The reader of stdout went away (``rxpipe run FILE | head``): the pipeline was cancelled
    like any downstream that stops asking, so it ends quietly with status 0. stdout is pointed at
    /dev/null first, so the interpreter's last flush at exit writes nowhere instead of printing
    another BrokenPipeError (the recipe of Python's signal module documentation, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(0)


def _schema_of(module: ModuleType) -> Schema | None:
    schema = getattr(module, "SETTINGS", None)
    return schema if isinstance(schema, Schema) else None


def _print_settings(spec: str, show_traceback: bool) -> None:
    """``--help-settings``: the table of the pipeline file's ``SETTINGS``."""
    try:
        module, name = load_module(spec)
    except Exception as error:
        _fail(error, spec, show_traceback)
    schema = _schema_of(module)
    if schema is None:
        path = resolve_spec(spec)[0]
        takes = "no settings" if not callable(getattr(module, name)) or isinstance(getattr(module, name), type) \
            else "settings its docstring describes"
        click.echo(f"{path}: declares no SETTINGS schema (rxpipe.settings.Schema); {name!r} takes {takes}")
        return
    click.echo(schema.table("text"), nl=False)


@main.command()
@click.argument("spec", metavar="FILE[:NAME]")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="As for `rxpipe run`.")
@click.option("--format", "fmt", type=click.Choice(["text", "mermaid"]), default="text",
              show_default=True)
@click.option("--traceback", "show_traceback", is_flag=True, help="Print full tracebacks on error.")
def graph(spec: str, settings: tuple[str, ...], fmt: str, show_traceback: bool) -> None:
    """Print the stages of the pipeline in FILE, upstream first (the branches of a balance, one
    per replica, under it; an engine's stage names its engine)."""
    _, pipeline, _ = _load(spec, settings, show_traceback)
    stages = _expand(pipeline)
    if fmt == "text":
        for name, kind, _, depth in stages:
            click.echo(f"{'  ' * depth}{name}  ({kind})")
        return
    click.echo("graph LR")
    for name, kind, ups, _ in stages:
        click.echo(f'  {_node(name)}["{name}<br/>{kind}"]')
        for up in ups:
            click.echo(f"  {_node(up)} --> {_node(name)}")


def _node(name: str) -> str:
    """A Mermaid node id for a stage name (``balance[0]`` → ``balance_0_``)."""
    return re.sub(r"\W", "_", name)


def _expand(pipeline: Pipeline) -> list[tuple[str, str, list[str], int]]:
    """(name, kind, upstream names, depth) per stage, with fused chains shown stage by stage and
    the branches of a stage that has them (``balance``: ``ports`` and ``outputs``) under it."""
    from ._fusion import FusedFlowable
    from .engines import Engine

    rows: list[tuple[str, str, list[str], int]] = []

    def add(stage: Any, ups: list[str], depth: int) -> None:
        if isinstance(stage, FusedFlowable):
            for fused in stage.stages:
                rows.append((fused.name, f"{fused.kind}, fused", ups, depth))
                ups = [fused.name]
            return
        kind = stage.kind
        engine = getattr(stage, "engine", None)
        if isinstance(engine, Engine):
            where = getattr(engine, "base_url", None)
            kind += f"; engine {engine.name}: {type(engine).__name__}{' at ' + public_url(where) if where else ''}"
        rows.append((stage.name, kind, ups, depth))
        for port, output in zip(getattr(stage, "ports", ()), getattr(stage, "outputs", ()), strict=False):
            add(port, [stage.name], depth + 1)
            for inner in _between(port, output):
                add(inner, [u.name for u in inner.upstreams], depth + 1)

    for stage in walk(pipeline.flowable):
        add(stage, [u.name for u in stage.upstreams], 0)
    return rows


def _between(port: Any, output: Any) -> list[Any]:
    """The stages of a branch from ``port`` (excluded) to ``output``, upstream first."""
    chain: list[Any] = []
    node = output
    while node is not port and node is not None:
        chain.append(node)
        node = node.upstreams[0] if node.upstreams else None
    return chain[::-1] if node is port else []


def _add_load_command() -> None:
    from .load._cli import load

    main.add_command(load)


_add_load_command()


if __name__ == "__main__":  # pragma: no cover
    with contextlib.suppress(KeyboardInterrupt):
        main()
