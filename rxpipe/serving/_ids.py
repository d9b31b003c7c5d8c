"""Request ids: one 128-bit number per HTTP request, written as a UUID4 (RFC 9562 §5.4).

The gateway draws one id per request (:func:`new_id_hex`): the ``id`` of its answer
(``chatcmpl-<hex>``), its ``x-request-id`` when the client sent none (``<hex>``) and the
``X-Request-Id`` an :class:`~rxpipe.engines.OpenAIEngine` sends the backend (the same digits in
the UUID's dashed form, :func:`~rxpipe.engines.openai.wire_request_id`) — so one request is one
id in the client's, the gateway's and the backend's logs, and servers that accept only a UUID4
there (llama.cpp's) accept it.
"""

from __future__ import annotations

import re
from random import getrandbits as _getrandbits

__all__ = ["new_id_hex", "uuid4_hex_suffix"]

#: the version nibble 4 and the variant bits 10 of a UUID4, set in a 128-bit number
_UUID4_BITS = (0x4 << 76) | (0x2 << 62)
#: the bits a UUID4 keeps from the random number (all but those six)
_UUID4_MASK = ~((0xF << 76) | (0x3 << 62)) & ((1 << 128) - 1)
#: 32 lowercase hex digits forming a UUID4 (version 4, variant 10)
_UUID4_HEX = re.compile(r"[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}")


def new_id_hex() -> str:
    """A new request id: 32 lowercase hex digits that are a UUID4 (122 bits of the PRNG, the
    version and variant bits set). An identifier, not a secret: the ``random`` module's PRNG
    (reseeded in forked children) instead of a ``getrandom()`` system call per request."""
    return f"{(_getrandbits(128) & _UUID4_MASK) | _UUID4_BITS:032x}"


def uuid4_hex_suffix(request_id: str) -> str | None:
    """The 32 hex digits of :func:`new_id_hex` that ``request_id`` ends with, whole or after a
    ``-`` (``"chatcmpl-<hex>"``, ``"<hex>"``); None for any other id."""
    start = len(request_id) - 32
    if start < 0 or (start > 0 and request_id[start - 1] != "-") or _UUID4_HEX.fullmatch(request_id, start) is None:
        return None
    return request_id[start:]
