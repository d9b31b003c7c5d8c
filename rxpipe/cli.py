"""The ``rxpipe`` command line: ``rxpipe run FILE[:NAME]``, ``rxpipe graph FILE[:NAME]`` and
``rxpipe load [BASE_URL]`` (the load generator, :mod:`rxpipe.load`)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
import traceback
from typing import Any, Callable

import click

from .loader import PipelineLoadError, load_pipeline, locate_error, parse_settings, split_spec
from .runtime import Pipeline, walk

__all__ = ["main"]


def _loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def _fail(error: BaseException, spec: str, show_traceback: bool) -> None:
    path = str(split_spec(spec)[0])
    if show_traceback:
        traceback.print_exception(error, file=sys.stderr)
    if isinstance(error, PipelineLoadError):
        click.echo(f"rxpipe: error: {error}", err=True)
    else:
        where = locate_error(error, path)
        message = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        click.echo(f"rxpipe: error: {message}\n  at {where}", err=True)
    sys.exit(1)


def _load(spec: str, settings: tuple[str, ...], show_traceback: bool) -> Pipeline:
    try:
        return load_pipeline(spec, parse_settings(settings))
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


async def _serve(pipeline: Pipeline, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal() -> None:
        if stop.is_set():  # a second signal: stop waiting for in-flight work
            click.echo("rxpipe: stopping now (in-flight work is cancelled)", err=True)
            for service in pipeline.services:
                service.abort()
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        on_item = None if pipeline.serves_http else _print_item
        async with pipeline.start(host=host, port=port, on_item=on_item) as running:
            if pipeline.serves_http:
                _tune_gc()  # the serving path's cycles are known to be cut; a user's graph's are not
            if running.url is not None:
                click.echo(f"rxpipe: {pipeline.name} serving on {running.url}")
                sys.stdout.flush()
            assert running.task is not None
            stopper = loop.create_task(stop.wait())
            await asyncio.wait({running.task, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if running.task.done():
                await running.wait()  # raises the pipeline's error
            else:
                click.echo("rxpipe: stopping (draining in-flight work)", err=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        sys.stdout.flush()


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
                   "Repeatable.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address of the HTTP edge.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535),
              help="Port of the HTTP edge (0 picks a free one).")
@click.option("--loop", "loop_name", type=click.Choice(["uvloop", "asyncio"]), default="uvloop",
              show_default=True, help="Event loop implementation.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Also serve Prometheus metrics on this port (the HTTP edge serves /metrics anyway).")
@click.option("--traceback", "show_traceback", is_flag=True, help="Print full tracebacks on error.")
def run(spec: str, settings: tuple[str, ...], host: str, port: int, loop_name: str,
        metrics_port: int | None, show_traceback: bool) -> None:
    """Run the pipeline defined in FILE (attribute NAME, default `pipeline`).

    The attribute is a rxpipe.Pipeline, a Flowable, or a factory `def pipeline(config: dict)`
    that receives the --set values. A pipeline with an HTTP edge is served on --host/--port
    until SIGINT/SIGTERM, then drained; any other pipeline's items are printed one per line
    until it completes. Exit status: 0 on completion or a requested stop, 1 on error (with the
    file and line that raised).

    \b
    Examples:
      rxpipe run pipelines/hello.py
      rxpipe run pipelines/llm_gateway.py --port 8000 --set queue_capacity=20
    """
    pipeline = _load(spec, settings, show_traceback)
    try:
        if metrics_port is not None:
            from prometheus_client import start_http_server

            start_http_server(metrics_port, addr=host)
        with asyncio.Runner(loop_factory=_loop_factory(loop_name)) as runner:
            runner.run(_serve(pipeline, host, port))
    except Exception as error:
        _fail(error, spec, show_traceback)
    except KeyboardInterrupt:
        sys.exit(130)


@main.command()
@click.argument("spec", metavar="FILE[:NAME]")
@click.option("--set", "settings", multiple=True, metavar="KEY=VALUE", help="As for `rxpipe run`.")
@click.option("--format", "fmt", type=click.Choice(["text", "mermaid"]), default="text",
              show_default=True)
@click.option("--traceback", "show_traceback", is_flag=True, help="Print full tracebacks on error.")
def graph(spec: str, settings: tuple[str, ...], fmt: str, show_traceback: bool) -> None:
    """Print the stages of the pipeline in FILE, upstream first."""
    pipeline = _load(spec, settings, show_traceback)
    stages = _expand(pipeline)
    if fmt == "text":
        for name, kind, _ in stages:
            click.echo(f"{name}  ({kind})")
        return
    click.echo("graph LR")
    for name, kind, ups in stages:
        click.echo(f'  {name}["{name}<br/>{kind}"]')
        for up in ups:
            click.echo(f"  {up} --> {name}")


def _expand(pipeline: Pipeline) -> list[tuple[str, str, list[str]]]:
    """(name, kind, upstream names) per stage, with fused chains shown stage by stage."""
    from ._fusion import FusedFlowable

    rows: list[tuple[str, str, list[str]]] = []
    for stage in walk(pipeline.flowable):
        ups = [u.name for u in stage.upstreams]
        if isinstance(stage, FusedFlowable):
            for fused in stage.stages:
                rows.append((fused.name, f"{fused.kind}, fused", ups))
                ups = [fused.name]
        else:
            rows.append((stage.name, stage.kind, ups))
    return rows


def _add_load_command() -> None:
    from .load._cli import load

    main.add_command(load)


_add_load_command()


if __name__ == "__main__":  # pragma: no cover
    with contextlib.suppress(KeyboardInterrupt):
        main()
