"""A worker's offsets of one partition: what it delivered, what it finished, what it may commit.

Kafka's consumer group keeps one committed offset per partition: every record below it is done.
A worker runs several requests of a partition at once and they finish out of order, so it
commits, in partition order, the lowest offset it has not finished (a long request holds back
the commits of the later ones it finished: they are counted in the backlog until it ends, and
run again by the next owner if this worker dies). After a rebalance the consumer reads again
from the committed offset: records this worker still holds or already finished come back, and
are not delivered twice (:meth:`PartitionOffsets.deliver`).

Kafka counts no deliveries; one count is kept per partition, for its first uncommitted record
(the *head*: the one a crash-looping request stays at), as the last record of the same partition
of the ``heads`` topic: ``{"o": offset, "d": deliveries}`` (commit metadata would be the place,
but the test broker, Tansu 0.6, drops it: measured). The worker that reads the head, or whose
commit point moves to a record it holds, writes its count before running it (the next owner
delivers it as delivery ``d + 1``), so a request that takes down every worker reading it reaches
``max_deliveries``. A request behind the head is not counted: a crash loop it causes counts
against the head until that one is failed (and committed), then against it.
"""

from __future__ import annotations

import orjson

__all__ = ["PartitionOffsets", "head_metadata", "parse_head"]


def head_metadata(offset: int, deliveries: int) -> bytes:
    """The ``heads`` record saying the record at ``offset`` was delivered ``deliveries`` times."""
    return orjson.dumps({"o": offset, "d": deliveries})


def parse_head(metadata: bytes | str | None) -> tuple[int, int] | None:
    """(offset, deliveries) of a record written by :func:`head_metadata` (None: other or none)."""
    if not metadata:
        return None
    try:
        data = orjson.loads(metadata)
        offset, deliveries = data["o"], data["d"]
    except (orjson.JSONDecodeError, TypeError, KeyError):
        return None
    if type(offset) is not int or type(deliveries) is not int:
        return None
    return offset, deliveries


class PartitionOffsets:
    """One partition as this worker owns it.

    ``committed``: the offset last committed (by anyone, as read at assignment; then by this
    worker); ``pending``: delivered offsets not finished, each with its delivery count;
    ``done``: finished offsets not yet below the commit point; ``released``: offsets given back
    undone, to be read again (they hold back the commit point as pending ones do); ``high``:
    the highest offset delivered; ``head``: (offset, deliveries) of the partition's head count
    at assignment (from the ``heads`` topic).
    """

    __slots__ = ("committed", "pending", "done", "released", "high", "head")

    def __init__(self, committed: int | None = None, head: tuple[int, int] | None = None) -> None:
        self.committed = committed
        self.pending: dict[int, int] = {}
        self.done: set[int] = set()
        self.released: dict[int, int] = {}
        self.high = -1
        self.head = head

    def deliver(self, offset: int) -> int:
        """Take the record at ``offset``: its delivery count (1 the first time; more for the head
        of a partition another worker held when it died), or 0 if it must not be delivered (this
        worker holds it, finished it, or it is below the commit point)."""
        if offset in self.pending or offset in self.done or (self.committed is not None and offset < self.committed):
            return 0
        if self.committed is None:
            self.committed = offset  # nothing committed yet: the first record read is the commit point
        head = self.head
        before = self.released.pop(offset, 0)
        deliveries = before + 1 if before else head[1] + 1 if head is not None and head[0] == offset else 1
        self.pending[offset] = deliveries
        if offset > self.high:
            self.high = offset
        return deliveries

    def is_head(self, offset: int) -> bool:
        """True if ``offset`` is the partition's first uncommitted record (as far as this worker
        knows): the one whose delivery count the ``heads`` topic carries."""
        return self.committed is None or offset == self.committed

    def finish(self, offset: int) -> int | None:
        """The request at ``offset`` is done (its reply is written): the new commit point if it
        moved (the lowest offset not finished), else None."""
        if self.pending.pop(offset, None) is None:
            return None  # not ours (delivered before a rebalance gave the partition to another worker)
        self.done.add(offset)
        point = min(min(self.pending, default=self.high + 1), min(self.released, default=self.high + 1))
        if self.committed is not None and point <= self.committed:
            return None
        self.committed = point
        self.done = {o for o in self.done if o >= point}
        return point

    def release(self, offset: int) -> bool:
        """Give the record at ``offset`` back undone (to be read again: the caller seeks back to
        it); True if it was pending."""
        deliveries = self.pending.pop(offset, None)
        if deliveries is None:
            return False
        self.released[offset] = deliveries
        return True

    def deliveries_at(self, offset: int) -> int:
        """How often the record at ``offset`` was delivered, as far as this worker knows (0: not
        delivered to it): what the commit of ``offset`` as the new head says."""
        return self.pending.get(offset, 0)

    def adopt(self, committed: int | None, head: tuple[int, int] | None) -> None:
        """The partition is (again) this worker's after a rebalance: the group's commit point and
        metadata as read now; what is below the commit point is done elsewhere."""
        self.head = head
        if committed is not None and (self.committed is None or committed > self.committed):
            self.committed = committed
            self.pending = {o: d for o, d in self.pending.items() if o >= committed}
            self.released = {o: d for o, d in self.released.items() if o >= committed}
            self.done = {o for o in self.done if o >= committed}
