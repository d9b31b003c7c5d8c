"""rxpipe's test kit, for our tests and yours (DESIGN §9).

- :class:`TestSubscriber` requests on command and records values, error and completion.
- :class:`TestPublisher` is driven by hand and records every ``request(n)`` and ``cancel``.
- :func:`run_virtual` runs a coroutine on :class:`VirtualTimeLoop`, where ``asyncio.sleep``,
  ``call_later`` and ``loop.time()`` advance instantly and deterministically.
- Marble tests with demand marks on that clock: :func:`assert_marbles` (from a plain test),
  ``await`` :func:`marbles` (inside a virtual-time test), :class:`Marbles` for several sources.
- :func:`draw_marbles` draws a marble diagram as an SVG picture (the manual's are drawn with it).
- :func:`check_operator` runs the operator contract (DESIGN §9: demand, bounds, cancel, error,
  completion) on any operator, yours included, and draws the failing run.
- ``rxpipe.testing.pytest_plugin``: async tests on asyncio and uvloop, ``@pytest.mark.virtual``
  for the virtual clock, a leak check, fixture ``loop``.
"""

from ._contract import CHECKS, check_operator
from ._marble_svg import draw_marbles
from ._marbles import (
    MarbleError,
    MarbleEvent,
    MarbleResult,
    Marbles,
    MarbleSource,
    assert_marbles,
    marbles,
    parse_demand,
    parse_marbles,
)
from ._publisher import TestPublisher
from ._subscriber import TestSubscriber
from ._virtual import VirtualTimeLoop, run_virtual

__all__ = [
    "check_operator",
    "CHECKS",
    "TestSubscriber",
    "TestPublisher",
    "VirtualTimeLoop",
    "run_virtual",
    "Marbles",
    "MarbleSource",
    "MarbleResult",
    "MarbleEvent",
    "MarbleError",
    "marbles",
    "assert_marbles",
    "parse_marbles",
    "parse_demand",
    "draw_marbles",
]
