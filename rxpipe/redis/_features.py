"""Feature detection of Redis 8 stream commands (used when present, never required).

Debian 12 ships Redis 7.0: no ``XACKDEL`` (8.2: acknowledge and delete in one command) and no
``XREADGROUP ... CLAIM`` (8.4: claim idle entries within the read). The transport works on 7.0
with ``XACK`` + ``XTRIM MINID`` and ``XAUTOCLAIM`` before ``XREADGROUP``; the detection result is
logged and exposed so operators see which path runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from ._connection import call

__all__ = ["Features", "detect_features", "parse_version"]


@dataclass(frozen=True)
class Features:
    """What the server offers. ``version``: ``INFO server``'s ``redis_version`` as a tuple."""

    version: tuple[int, ...]
    xackdel: bool
    xreadgroup_claim: bool


def parse_version(text: str) -> tuple[int, ...]:
    """``"7.0.15"`` → ``(7, 0, 15)``; non-numeric parts stop the parse."""
    parts: list[int] = []
    for part in text.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


async def detect_features(client: Redis, probe_key: str) -> Features:
    """``INFO server``, and a probe: ``XACKDEL probe_key g IDS 1 0-1`` on a key that holds nothing.
    "unknown command" means absent; any other answer (an error about the key or group) means the
    server knows the command."""
    info = await call(client.info, "server")
    version = parse_version(str(info.get("redis_version", "0")))
    try:
        await call(client.execute_command, "XACKDEL", probe_key, "rxpipe-probe", "IDS", "1", "0-1")
        xackdel = True
    except ResponseError as error:
        xackdel = "unknown command" not in str(error).lower()
    return Features(version, xackdel, version >= (8, 4))
