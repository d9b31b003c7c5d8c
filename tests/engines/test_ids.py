"""Request ids: one UUID4 per request (rxpipe.serving._ids) and the X-Request-Id sent upstream."""

from __future__ import annotations

import hashlib
import random
import uuid

import pytest

from rxpipe.engines.openai import wire_request_id
from rxpipe.serving import _ids
from rxpipe.serving._ids import new_id_hex, uuid4_hex_suffix


def test_a_new_id_is_32_hex_digits_of_a_uuid4(monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(2000):
        digits = new_id_hex()
        parsed = uuid.UUID(digits)
        assert (parsed.hex, parsed.version, parsed.variant) == (digits, 4, uuid.RFC_4122)
    # every bit but the version and variant ones comes from the PRNG
    monkeypatch.setattr(_ids, "_getrandbits", lambda bits: (1 << bits) - 1)
    assert new_id_hex() == "ffffffffffff4fffbfffffffffffffff"
    monkeypatch.setattr(_ids, "_getrandbits", lambda bits: 0)
    assert new_id_hex() == "00000000000040008000000000000000"


def test_the_suffix_is_found_only_whole_and_after_a_dash() -> None:
    digits = "0123456789ab4def8123456789abcdef"
    assert uuid4_hex_suffix("chatcmpl-" + digits) == digits
    assert uuid4_hex_suffix(digits) == digits
    assert uuid4_hex_suffix("cmpl" + digits) is None  # not after a dash
    assert uuid4_hex_suffix("cmpl-" + digits + ":usage") is None
    assert uuid4_hex_suffix("cmpl-" + digits.upper()) is None
    assert uuid4_hex_suffix("cmpl-0123456789ab3def8123456789abcdef") is None  # version 3
    assert uuid4_hex_suffix("cmpl-0123456789ab4def7123456789abcdef") is None  # variant 0xxx
    assert uuid4_hex_suffix("cmpl-0123") is None and uuid4_hex_suffix("") is None


def test_the_wire_id_of_a_gateway_id_is_its_digits_as_a_uuid() -> None:
    digits = new_id_hex()
    wire = wire_request_id("chatcmpl-" + digits)
    assert uuid.UUID(wire).hex == digits and str(uuid.UUID(digits)) == wire


@pytest.mark.parametrize("request_id", ["cmpl-abc", "cmpl-0123456789ab4def8123456789abcdef:usage",
                                        "my-own-id-0123456789ab3def8123456789abcdef", "cmpl-0123456789abcdef01234567"])
def test_any_other_id_is_sent_as_the_uuid4_of_its_digest(request_id: str) -> None:
    expected = str(uuid.UUID(hashlib.md5(request_id.encode()).hexdigest(), version=4))
    assert wire_request_id(request_id) == expected == wire_request_id(request_id)
    assert uuid.UUID(expected).version == 4


def test_distinct_gateway_ids_give_distinct_wire_ids() -> None:
    rng = random.Random(7)
    ids = {f"chatcmpl-{(rng.getrandbits(128) & _ids._UUID4_MASK) | _ids._UUID4_BITS:032x}" for _ in range(500)}
    assert len({wire_request_id(i) for i in ids}) == len(ids) == 500
