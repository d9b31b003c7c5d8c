"""The ``rxpipe load`` command (click); the work is done by :func:`rxpipe.load.run_load`."""

from __future__ import annotations

import asyncio
import re
import sys
from typing import TYPE_CHECKING, Any

import click
import uvloop

if TYPE_CHECKING:
    from ._client import RequestRecord

__all__ = ["load", "parse_ramp", "parse_goodput"]

_SLO = re.compile(r"^(ttft|tpot|e2el):([0-9]+(?:\.[0-9]*)?)$")


def parse_ramp(text: str) -> tuple[float, float]:
    """``"1:50"`` -> (1.0, 50.0) requests/s. Raises click.BadParameter."""
    try:
        start, end = (float(part) for part in text.split(":"))
    except ValueError:
        raise click.BadParameter(f"expected START:END requests/s, e.g. 1:50, got {text!r}") from None
    if not (start > 0 and end > 0):
        raise click.BadParameter(f"both rates must be > 0, got {text!r}")
    return start, end


def parse_goodput(pairs: list[str]) -> dict[str, float]:
    """``["ttft:500", "e2el:2000"]`` -> {"ttft": 500.0, "e2el": 2000.0} (milliseconds; names as
    ``vllm bench serve --goodput``: ttft, tpot, e2el). Raises click.BadParameter."""
    slos: dict[str, float] = {}
    for pair in pairs:
        match = _SLO.match(pair)
        if not match:
            raise click.BadParameter(f"expected NAME:MS with NAME in ttft, tpot, e2el, got {pair!r}",
                                     param_hint="--goodput")
        slos[match.group(1)] = float(match.group(2))
    return slos


class _ProgressLine:
    """A live line (rich) while the run goes: elapsed/duration, sent, outcomes, in flight."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(stderr=True)
        self.progress = Progress(TextColumn("load"), BarColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.description}"), console=console, transient=False,
                                 disable=not console.is_terminal)
        self.task = self.progress.add_task("", total=1.0)

    def __call__(self, elapsed: float, duration: float, records: list[RequestRecord], in_flight: int) -> None:
        sent = sum(1 for r in records if r.attempts)
        counts = {"2xx": 0, "429": 0, "503": 0, "timeout": 0}
        for record in records:
            if record.done_s is not None and record.outcome in counts:
                counts[record.outcome] += 1
        description = (f"sent {sent}  2xx {counts['2xx']}  429 {counts['429']}  503 {counts['503']}  "
                       f"timeout {counts['timeout']}  in flight {in_flight}")
        self.progress.update(self.task, completed=min(1.0, elapsed / duration), description=description)


@click.command()
@click.argument("args", nargs=-1, metavar="[BASE_URL]")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Constant offered rate (requests/s). Default 1 unless --ramp.")
@click.option("--ramp", default=None, metavar="START:END",
              help="Raise the offered rate linearly from START to END requests/s over --duration, e.g. 1:50.")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=60.0, show_default=True,
              help="Sending window (seconds); requests in flight at its end are awaited.")
@click.option("--burstiness", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Gamma shape of inter-arrival times: 1 Poisson, <1 burstier, >1 more regular (vLLM's).")
@click.option("--stream", is_flag=True, help="Stream (SSE): measures TTFT, TPOT and ITL.")
@click.option("--chat", is_flag=True, help="Use /v1/chat/completions instead of /v1/completions.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=64, show_default=True,
              help="max_tokens of each request (a prompt file's own max_tokens wins).")
@click.option("--prompt-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help='JSONL, one {"prompt": ...} or {"messages": [...]} per line, optional "max_tokens". '
                   "Default: a small set shipped with rxpipe.")
@click.option("--model", default=None, help="Model id; default: the first of GET /v1/models.")
@click.option("--api-key", envvar="OPENAI_API_KEY", default=None, help="Bearer key (also OPENAI_API_KEY).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=30.0, show_default=True,
              help="Per attempt: seconds until the answer is complete; past it the attempt counts as a timeout.")
@click.option("--retry", type=click.IntRange(min=0), default=0, show_default=True,
              help="Retry a 429/503 up to N times after its Retry-After, as the OpenAI SDKs do.")
@click.option("--goodput", "goodput", multiple=True, metavar="NAME:MS",
              help="Service-level objectives for request_goodput, e.g. --goodput ttft:500 e2el:2000 "
                   "(names ttft, tpot, e2el; milliseconds).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the schedule and prompt choice.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the figures, the per-second series and their definitions to this file.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Draw the per-second series into this PNG (needs matplotlib: the plot extra).")
@click.option("--aimd", is_flag=True,
              help="Closed loop: keep an AIMD window of requests in flight, read from the server's credit headers "
                   "(x-rxpipe-queue-room, x-llm-d-flow-band-headroom-requests): slow start, then +1 per window of "
                   "answers with room, x0.5 on a 429 or no room. Excludes --rate/--ramp.")
@click.option("--aimd-initial", type=click.FloatRange(min=1), default=1.0, show_default=True,
              help="--aimd: the window to start with (requests in flight).")
@click.option("--aimd-max", type=click.FloatRange(min=1), default=1024.0, show_default=True,
              help="--aimd: the window's upper bound (requests in flight).")
@click.option("--aimd-decrease", type=click.FloatRange(min=0, max=1, min_open=True, max_open=True), default=0.5,
              show_default=True, help="--aimd: the factor a 429 or an answer with no room cuts the window by.")
@click.option("--no-scrape", is_flag=True, help="Do not read the server's /metrics each second.")
@click.option("--quiet", is_flag=True, help="No progress line.")
def load(args: tuple[str, ...], rate: float | None, ramp: str | None, duration: float, burstiness: float,
         stream: bool, chat: bool, max_tokens: int, prompt_file: str | None, model: str | None,
         api_key: str | None, timeout: float, retry: int, goodput: tuple[str, ...], seed: int,
         json_path: str | None, plot_path: str | None, aimd: bool, aimd_initial: float, aimd_max: float,
         aimd_decrease: float, no_scrape: bool, quiet: bool) -> None:
    """Send open-loop load to an OpenAI-compatible server at BASE_URL (default
    http://127.0.0.1:8000) and report vLLM's figures plus refusals, Retry-After and a per-second
    series (offered, admitted, 429, 503, latency, the server's queue and running count).

    \b
    Examples:
      rxpipe load --rate 20 --duration 30
      rxpipe load --ramp 1:50 --duration 60 --plot load.png --json load.json
      rxpipe load http://127.0.0.1:8000 --stream --retry 3 --goodput ttft:500 e2el:2000
      rxpipe load --aimd --duration 30 --json aimd.json
    """
    # the work's modules are imported here, so `rxpipe run` does not pay for them
    from ._plot import INSTALL_HINT, PlotUnavailable, write_plot
    from ._prompts import read_prompts
    from ._report import format_table, write_json
    from ._runner import LoadConfig, run_load

    slos = [a for a in args if _SLO.match(a)]
    urls = [a for a in args if not _SLO.match(a)]
    if slos and not goodput:
        raise click.UsageError(f"{slos[0]!r} looks like an objective: put it after --goodput")
    if len(urls) > 1:
        raise click.UsageError(f"one BASE_URL at most, got {', '.join(urls)}")
    if rate is not None and ramp is not None:
        raise click.UsageError("--rate and --ramp exclude each other")
    objectives = parse_goodput([*goodput, *slos]) if goodput else None
    if objectives and not stream and {"ttft", "tpot"} & set(objectives):
        raise click.UsageError("ttft and tpot objectives need --stream (they are measured on token chunks)")
    if aimd and (rate is not None or ramp is not None):
        raise click.UsageError("--aimd is a closed loop: it excludes --rate and --ramp")
    rates = parse_ramp(ramp) if ramp is not None else (rate or 1.0, rate or 1.0)
    gate = None
    if aimd:
        from ._aimd import AimdConfig

        try:
            gate = AimdConfig(initial=aimd_initial, max_window=aimd_max, decrease=aimd_decrease)
        except ValueError as error:
            raise click.UsageError(str(error)) from None
    if plot_path is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            click.echo(f"rxpipe load: --plot needs matplotlib: {INSTALL_HINT}; running without the plot", err=True)
            plot_path = None
    try:
        prompts = tuple(read_prompts(prompt_file)) if prompt_file else ()
    except (OSError, ValueError) as error:
        raise click.UsageError(str(error)) from None
    config = LoadConfig(base_url=urls[0] if urls else "http://127.0.0.1:8000", rate=rates, duration_s=duration,
                        burstiness=burstiness, stream=stream, chat=chat, max_tokens=max_tokens, prompts=prompts,
                        model=model, api_key=api_key, timeout_s=timeout, retries=retry, goodput=objectives,
                        seed=seed, scrape=not no_scrape, aimd=gate)
    progress = None if quiet else _ProgressLine()
    try:
        # uvloop, as `rxpipe run`: the sender keeps to its schedule at higher rates
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            if progress is not None:
                with progress.progress:
                    result = runner.run(run_load(config, progress))
            else:
                result = runner.run(run_load(config))
    except RuntimeError as error:
        click.echo(f"rxpipe load: error: {error}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("rxpipe load: interrupted; no figures", err=True)
        sys.exit(130)
    figures: dict[str, Any] = result.figures
    click.echo(format_table(figures))
    if json_path is not None:
        write_json(figures, json_path)
        click.echo(f"rxpipe load: figures written to {json_path}")
    if plot_path is not None:
        try:
            write_plot(figures, plot_path)
        except PlotUnavailable as error:
            click.echo(f"rxpipe load: {error}", err=True)
        else:
            click.echo(f"rxpipe load: plot written to {plot_path}")
