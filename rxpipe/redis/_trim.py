"""Trimming acknowledged entries off the request stream (``XTRIM MINID``).

Every entry with an id at most the group's ``last-delivered-id`` was delivered; of those, the ones
below the oldest pending entry (``XPENDING`` summary ``min``) are acknowledged. So the stream is
trimmed below the oldest pending entry, or, with nothing pending, below the entry after the last
delivered one. Entries not yet delivered (ids above ``last-delivered-id``) are never touched. The
stream is assumed to have one consumer group (ours).
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from ._connection import RedisSettings, call

__all__ = ["trim_acknowledged", "next_id"]


def next_id(entry_id: bytes | str) -> bytes:
    """The smallest stream id above ``entry_id`` (``"5-3"`` → ``b"5-4"``)."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return f"{int(ms)}-{int(seq or 0) + 1}".encode()


def _ours(groups: Any, group: str) -> dict[str, Any] | None:
    for info in groups or ():
        name = info.get("name")
        if (name.decode() if isinstance(name, bytes) else name) == group:
            return dict(info)
    return None


async def trim_acknowledged(client: Redis, settings: RedisSettings) -> int:
    """Trim acknowledged entries; return how many were removed (0 when the group is missing)."""
    info = _ours(await call(client.xinfo_groups, settings.stream), settings.group)
    if info is None:
        return 0
    if int(info.get("pending", 0)):
        summary = await call(client.xpending, settings.stream, settings.group)
        minid = summary.get("min")
        if minid is None:
            return 0
    else:
        last = info.get("last-delivered-id")
        if last is None:
            return 0
        minid = next_id(last)
    return int(await call(client.xtrim, settings.stream, minid=minid, approximate=False))
