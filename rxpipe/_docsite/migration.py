"""``docs/migration.md``: every reactivex 6.1 operator and source beside its rxpipe counterpart,
or the reason it has none, generated from ``reactivex.operators.__all__``, ``reactivex.__all__``,
``rxpipe.operators.__all__`` and ``rxpipe.__all__``.

A name rxpipe shares is listed as such the moment it exists (issue 34 adds the rest of the
vocabulary); :data:`NEVER` says why a name will have no counterpart and :data:`CLOSEST` what
to use until it has one. ``tests/test_docs.py`` fails while the page differs from
:func:`migration_page`, or while a reason is kept for a name rxpipe now has.
"""

from __future__ import annotations

import inspect

__all__ = ["NEVER", "CLOSEST", "OWN", "migration_page", "reactivex_names"]

#: reactivex names rxpipe will not have, and why (DESIGN §3, third round)
NEVER = {
    "observe_on": "a scheduler hop: an asyncio program has one loop, and every rxpipe signal is a call on it",
    "subscribe_on": "a scheduler hop: an asyncio program has one loop, and every rxpipe signal is a call on it",
    "to_iterable": "blocking: use `async for x in flowable` (cancels upstream when the loop is left)",
    "single_or_default_async": "a reactivex internal (the body of `single_or_default`)",
    "to_marbles": "`rxpipe.testing` has its own marble kit, with demand marks (`marbles`, `assert_marbles`)",
    "as_observable": "typing only; `flowable.to_observable()` gives a reactivex Observable",
    "cast": "typing only",
    # sources
    "compose": "`rx.pipe(*operators)` composes operators",
    "to_async": "a scheduler hop; `map_async` runs coroutine functions with bounded concurrency",
    "start_async": "use `rx.from_future(coro)`",
    "from_callback": "a callback API is a push source: wrap it with `rx.from_observable` (bounded, with an overflow "
                     "strategy)",
}

#: what to use today for a reactivex name that rxpipe has not got yet (only where it is close)
CLOSEST = {
    "do_action": "`ops.tap(on_next, on_error, on_complete)`",
    "do": "`ops.tap(...)` with the observer's three callbacks",
    "buffer_with_count": "`ops.batch(max_size)` (emits a batch only when one is demanded: Akka groupedWithin)",
    "buffer_with_time_or_count": "`ops.batch(max_size, max_delay_s)`",
    "share": "`ops.broadcast(n)` for a known number of branches (the slowest branch governs)",
    "publish": "`ops.broadcast(n)` for a known number of branches (the slowest branch governs)",
    "zip_with_iterable": "`ops.zip(rx.from_iterable(xs))`",
    "merge_all": "`ops.flat_map(lambda inner: inner)` (bounded by `max_concurrency`)",
    "concat_all": "`ops.concat_map(lambda inner: inner)`",
    "switch_latest": "`ops.switch_map(lambda inner: inner)`",
    "flat_map_latest": "`ops.switch_map(fn)`",
    "timestamp": "`ops.map(lambda x: (loop.time(), x))`",
    "ignore_elements": "`ops.filter(lambda _: False)`",
}

#: rxpipe names reactivex has the same name for, but a different meaning by argument type
OWN = {
    "buffer": "`buffer(capacity: int, overflow)` is rxpipe's bounded queue (an async boundary); RxPY's "
              "`buffer(boundaries)` (lists closed by another stream) arrives with issue 34",
    "timeout": "`timeout(seconds, mode)` is rxpipe's (idle or per item); RxPY's `timeout(duetime, other)` "
               "arrives with issue 34",
    "group_by": "`group_by(key, max_groups)` bounds the open groups (default 1024)",
}


def reactivex_names() -> tuple[list[str], list[str]]:
    """reactivex 6.1's operators (``reactivex.operators.__all__``) and its sources (the
    functions of ``reactivex.__all__``), each sorted."""
    import reactivex
    import reactivex.operators

    sources = [name for name in reactivex.__all__ if inspect.isfunction(getattr(reactivex, name, None))]
    return sorted(reactivex.operators.__all__), sorted(sources)


def _row(name: str, ours: set[str], prefix: str, page: str) -> str:
    if name in ours:
        note = OWN.get(name, "same name and argument order; its demand rule is in its reference entry")
        return f"| `{name}` | [`{prefix}.{name}`](reference/{page}#{_anchor(prefix)}.{name}) | {note} |"
    if name in NEVER:
        return f"| `{name}` | none | {NEVER[name]} |"
    if name in CLOSEST:
        return f"| `{name}` | not yet (issue 34) | until then: {CLOSEST[name]} |"
    return (f"| `{name}` | not yet (issue 34) | issue 34 adds it with reactivex's name and argument order, "
            f"and a demand rule |")


def _anchor(prefix: str) -> str:
    return "rxpipe.operators" if prefix == "ops" else "rxpipe"


def migration_page() -> str:
    """The Markdown of ``docs/migration.md``."""
    import rxpipe
    import rxpipe.operators

    operators, sources = reactivex_names()
    ours_ops, ours_rx = set(rxpipe.operators.__all__), set(rxpipe.__all__)
    stale = sorted((set(NEVER) | set(CLOSEST)) & (ours_ops | ours_rx) - set(OWN))
    if stale:
        raise ValueError(f"rxpipe now has {', '.join(stale)}: drop their reasons from rxpipe._docsite.migration")
    shared_ops = [n for n in operators if n in ours_ops]
    shared_rx = [n for n in sources if n in ours_rx]
    beyond = [n for n in rxpipe.operators.__all__ if n not in operators and callable(getattr(rxpipe.operators, n))
              and not inspect.isclass(getattr(rxpipe.operators, n))]
    lines = [
        "# From reactivex (RxPY)",
        "",
        "<!-- generated by `python -m rxpipe._docsite` from reactivex's and rxpipe's `__all__`;",
        "     tests/test_docs.py fails while it is stale -->",
        "",
        "rxpipe's operators keep reactivex's names and argument order wherever reactivex has the",
        "operator, so code written for RxPY reads the same: `from rxpipe import operators as ops` in",
        "place of `from reactivex import operators as ops`, and `rx.from_iterable(xs).pipe(...)` as",
        "before. What changes is underneath: every rxpipe operator passes Reactive Streams demand",
        "(`request(n)`) upstream, so a slow consumer slows the source instead of filling a buffer, and",
        "each one's reference entry says exactly what it asks of its upstream. Under unbounded demand",
        "and cold sources a shared operator emits what reactivex emits for the same input.",
        "",
        f"Of reactivex 6.1's {len(operators)} operators, rxpipe has {len(shared_ops)} under the same name"
        f" today; of its {len(sources)} sources, {len(shared_rx)}.",
        "",
        "## Operators (`reactivex.operators`)",
        "",
        "| reactivex | rxpipe | note |",
        "|---|---|---|",
        *[_row(name, ours_ops, "ops", "operators.md") for name in operators],
        "",
        "## Sources (`reactivex`)",
        "",
        "| reactivex | rxpipe | note |",
        "|---|---|---|",
        *[_row(name, ours_rx, "rx", "rxpipe.md") for name in sources],
        "",
        "## Beyond reactivex",
        "",
        "Operators rxpipe has and reactivex has not: flow control and serving, each with its demand rule.",
        "",
        *[f"- [`ops.{name}`](reference/operators.md#rxpipe.operators.{name})" for name in beyond],
        "",
    ]
    return "\n".join(lines)
