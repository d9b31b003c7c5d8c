"""What a stage declares about its items, read by the stages after it (DESIGN §3 "Writing a stage").

A stage is never recognised by its name or type: it *declares* capabilities, and stages that
only pass their upstream's items along (tap, filter, map, buffer, timeout, ...) show their
upstream's declaration, through any number of them. The executor reads
``source.capabilities.max_batch_size`` to request a batch only when a whole one fits.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Capabilities", "NO_CAPABILITIES"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Declared properties of a stage's items.

    ``max_batch_size``: every item is a list of at most this many elements (``batch(n)``
    declares ``n``); None: items are not batches.
    """

    max_batch_size: int | None = None


#: What a stage declares by default: nothing.
NO_CAPABILITIES = Capabilities()
