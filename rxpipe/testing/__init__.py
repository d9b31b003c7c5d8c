"""rxpipe's test kit, for our tests and yours (DESIGN §9).

- :class:`TestSubscriber` requests on command and records values, error and completion.
- :class:`TestPublisher` is driven by hand and records every ``request(n)`` and ``cancel``.
- :func:`run_virtual` runs a coroutine on :class:`VirtualTimeLoop`, where ``asyncio.sleep``,
  ``call_later`` and ``loop.time()`` advance instantly and deterministically.
"""

from ._publisher import TestPublisher
from ._subscriber import TestSubscriber
from ._virtual import VirtualTimeLoop, run_virtual

__all__ = ["TestSubscriber", "TestPublisher", "VirtualTimeLoop", "run_virtual"]
