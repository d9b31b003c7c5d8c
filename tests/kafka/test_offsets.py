"""A worker's offsets of one partition (rxpipe.kafka._offsets): commits in partition order, what a
rebalance reads again is not delivered twice, the head's delivery count."""

from __future__ import annotations

from rxpipe.kafka._offsets import PartitionOffsets, head_metadata, parse_head


def test_commits_follow_partition_order_a_long_request_holds_back_the_later_ones() -> None:
    p = PartitionOffsets()
    assert [p.deliver(o) for o in (10, 11, 12, 13)] == [1, 1, 1, 1]
    assert p.committed == 10  # nothing committed before: the first record read is the commit point
    assert p.finish(11) is None and p.finish(13) is None  # 10 still runs: nothing moves
    assert p.finish(10) == 12  # 10 and 11 done, 12 still runs
    assert p.finish(12) == 14
    assert p.finish(12) is None  # finished already
    assert (p.pending, p.done, p.committed) == ({}, set(), 14)


def test_what_a_rebalance_reads_again_is_skipped_held_or_finished() -> None:
    p = PartitionOffsets(committed=5)
    assert [p.deliver(o) for o in (5, 6, 7)] == [1, 1, 1]
    assert p.finish(7) is None  # held back by 5 and 6
    p.adopt(5, None)  # the partition is ours again: the consumer reads from 5
    assert [p.deliver(o) for o in (5, 6, 7, 8)] == [0, 0, 0, 1]  # held, held, finished, new
    assert p.deliver(4) == 0  # below the commit point
    assert p.finish(5) == 6 and p.finish(6) == 8


def test_adopting_a_later_commit_drops_what_another_member_finished() -> None:
    p = PartitionOffsets(committed=0)
    for o in (0, 1, 2):
        p.deliver(o)
    p.adopt(2, (2, 3))  # another member committed up to 2 meanwhile; the head 2 was delivered 3 times
    assert (sorted(p.pending), p.committed) == ([2], 2)
    assert p.finish(0) is None and p.finish(1) is None  # not ours any more
    assert p.finish(2) == 3


def test_the_head_is_delivered_with_its_count_and_a_released_record_holds_back_the_commit() -> None:
    p = PartitionOffsets(committed=3, head=(3, 4))
    assert p.is_head(3) and not p.is_head(4)
    assert p.deliver(3) == 5 and p.deliver(4) == 1
    assert p.deliveries_at(3) == 5 and p.deliveries_at(9) == 0
    assert p.release(3) and not p.release(3)
    assert p.finish(4) is None  # 3 was given back undone: the commit stays at 3
    assert p.deliver(3) == 6  # read again: one more delivery
    assert p.finish(3) == 5


def test_head_metadata_round_trips_and_foreign_metadata_is_none() -> None:
    assert parse_head(head_metadata(17, 2)) == (17, 2)
    assert [parse_head(m) for m in (None, "", "x", '{"o": 1}', '{"o": "1", "d": 2}', "[1]")] == [None] * 6
