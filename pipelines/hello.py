"""hello: the smallest tour of rxpipe's operators.

    rxpipe run pipelines/hello.py                  # prints 10 lines
    rxpipe run pipelines/hello.py --set count=3    # the first 3

Squares the numbers 0..19, keeps the odd ones, numbers them with a running total, and
stops after ``count`` (default 10). Every operator here is synchronous, so the chain is fused
into one call per item and runs inside the source's drain loop.
"""

import rxpipe as rx
from rxpipe import operators as ops
from rxpipe.settings import Schema, Setting

#: its one setting (``--set count=3``; ``rxpipe run pipelines/hello.py --help-settings``)
SETTINGS = Schema(Setting("count", 10, "int", "how many lines to print", minimum=0))


def pipeline(config: dict) -> rx.Flowable:
    count = SETTINGS.resolve(config)["count"]
    return rx.range(0, 20).pipe(
        ops.map(lambda x: x * x, name="square"),
        ops.filter(lambda x: x % 2 == 1, name="odd"),
        ops.scan(lambda acc, x: (acc[0] + 1, x, acc[2] + x), (0, 0, 0), name="running_total"),
        ops.map(lambda t: f"#{t[0]}: {t[1]} (total {t[2]})", name="format"),
        ops.take(count, name="first"),
    )
