"""What Prometheus metrics cost the hot path: bench/throughput.py's rxpipe rows, scraped and not.

    .venv/bin/python bench/metrics_overhead.py [--n 1000000] [--rounds 5] [--scrape-s 0.1]

rxpipe's stage counters are plain ints bumped per pass (always on); the export reads every live
stage lazily at scrape time. So "metrics off" is the run with nobody scraping, and "metrics on"
is the same run while a thread renders the whole registry (``generate_latest``, what a
Prometheus scrape of ``/metrics`` does) every ``--scrape-s`` seconds: 0.1 s is ten times a 1 s
scrape interval, a pessimistic load. Rows run interleaved for ``--rounds`` rounds; the table
shows medians and the on/off ratio. Not a test: ``bench/`` is outside pytest's ``testpaths``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
from pathlib import Path

import uvloop
from prometheus_client import REGISTRY, generate_latest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import throughput  # noqa: E402  (bench/ is not a package)


class Scraper:
    """Renders the registry every ``period_s`` seconds on its own thread while running."""

    def __init__(self, period_s: float) -> None:
        self.period_s = period_s
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            generate_latest(REGISTRY)
            self.scrapes += 1

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--scrape-s", type=float, default=0.1, help="seconds between renders when on")
    args = parser.parse_args(argv)
    rows = [("rxpipe fused", throughput.rxpipe_fused), ("rxpipe + buffer(256)", throughput.rxpipe_boundary)]
    want = throughput.expected_sum(args.n)
    times: dict[tuple[str, bool], list[float]] = {(name, on): [] for name, _ in rows for on in (False, True)}
    scrapes = 0
    print(f"{args.n:,} items; median of {args.rounds} interleaved rounds; metrics on = a registry render every "
          f"{args.scrape_s:g} s on another thread; Python {sys.version.split()[0]}, uvloop", flush=True)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        for r in range(args.rounds):
            for name, impl in rows:
                for on in ((False, True) if r % 2 == 0 else (True, False)):
                    if on:
                        with Scraper(args.scrape_s) as scraper:
                            seconds, total = runner.run(throughput.timed(impl, args.n))
                        scrapes += scraper.scrapes
                    else:
                        seconds, total = runner.run(throughput.timed(impl, args.n))
                    if total != want:
                        print(f"CHECKSUM MISMATCH: {name} summed {total}, expected {want}", file=sys.stderr)
                        return 1
                    times[(name, on)].append(seconds)
    print("\n| implementation | metrics off items/s | metrics on items/s | on / off |")
    print("|---|---:|---:|---:|")
    for name, _ in rows:
        off = statistics.median(times[(name, False)])
        on = statistics.median(times[(name, True)])
        print(f"| {name} | {args.n / off:,.0f} | {args.n / on:,.0f} | {off / on:.3f} |")
    print(f"\n{scrapes} registry renders while on")
    return 0


if __name__ == "__main__":
    sys.exit(main())
