"""Bearer keys of the edge: who is calling (DESIGN §5).

The keys are ``api_keys`` (ids ``key_0`` ...) and, with a tenants file, every tenant's keys
(numbered after ``api_keys``, sorted). A key id, never the key, is what the rest of the edge sees
(the request's ``api_key_id``, the per-key token buckets, the tenant of a key).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from ._tenants import Tenants

__all__ = ["KeyRing"]


class KeyRing:
    """The configured bearer keys and the tenant each one names.

    Args: api_keys (the gateway's ``api_keys``); tenants (the tenants in force, whose ``keys``
        are accepted too; None without a tenants file).
    """

    __slots__ = ("_keys", "_tenants")

    def __init__(self, api_keys: Sequence[str], tenants: Tenants | None = None) -> None:
        extra = sorted(tenants.keys_configured - set(api_keys)) if tenants is not None else []
        keys = (*api_keys, *extra)
        self._keys = tuple((key.encode(), f"key_{i}") for i, key in enumerate(keys))
        #: key id -> the configured name of the tenant the key belongs to
        self._tenants: dict[str, str] = {}
        if tenants is not None:
            for i, key in enumerate(keys):
                tenant = tenants.for_key(key)
                if tenant is not None:
                    self._tenants[f"key_{i}"] = tenant.name

    @property
    def enabled(self) -> bool:
        """True when keys are configured (every completion route and ``/v1/models`` need one)."""
        return bool(self._keys)

    def __len__(self) -> int:
        """How many keys are configured (``api_keys`` and the tenants' other keys, each once)."""
        return len(self._keys)

    def authenticate(self, header: str | None) -> str | None:
        """The key id (``key_<i>``) for ``Authorization: Bearer <key>``, ``"anonymous"`` when no
        keys are configured, or None when the key is missing, wrong or not UTF-8. The scheme is
        case-insensitive (RFC 9110 §11.1); every configured key is compared in constant time
        (``hmac.compare_digest``), so the answer's timing does not tell which key matched."""
        keys = self._keys
        if not keys:
            return "anonymous"
        scheme, _, token = (header or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        try:
            given = token.strip().encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8 (aiohttp keeps them as surrogates)
            return None
        found = None
        for key, key_id in keys:
            if hmac.compare_digest(given, key):
                found = key_id
        return found

    def tenant_of(self, key_id: str) -> str | None:
        """The name of the tenant whose key ``key_id`` is (None: a key of ``api_keys`` that no
        tenant lists)."""
        return self._tenants.get(key_id)
