"""Tenants of one gateway: the ``tenants_file`` (JSON or TOML), validated, frozen (DESIGN §5).

Schema, one entry per tenant name::

    {"acme": {"keys": ["sk-acme-1"], "weight": 2, "priority": 0, "rpm": 600, "tpm": 90000}}

Every field is optional: ``keys`` (bearer keys naming this tenant; default none), ``weight``
(fair share, a number > 0; default 1), ``priority`` (int, higher bands are served first;
default 0), ``rpm`` (requests per minute) and ``tpm`` (tokens per minute), each a positive int or
null (no limit; default null). A tenant named ``default`` may be configured; if it is not, an
implicit one (weight 1, priority 0, no limits, no keys) exists, because unknown callers share it.
``other`` is reserved: it is the metric label of every name that is not configured.

Errors are :class:`TenantsFileError` naming the file, the tenant and the field. Reload is pure:
:meth:`Tenants.reload` returns a new object or raises, so the caller keeps the old one in force.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..errors import RxPipeError

__all__ = ["DEFAULT_TENANT", "OTHER_LABEL", "TENANT_HEADER", "Tenant", "Tenants", "TenantsFileError"]

#: the tenant unknown callers share (auth off: an unknown ``x-rxpipe-tenant``; auth on: a key of
#: ``api_keys`` that no tenant lists)
DEFAULT_TENANT = "default"
#: metric label for a name that is not configured (labels come from a bounded set, DESIGN §7)
OTHER_LABEL = "other"
#: request header naming the tenant when authentication is off
TENANT_HEADER = "x-rxpipe-tenant"

_FIELDS = ("keys", "weight", "priority", "rpm", "tpm")


class TenantsFileError(RxPipeError, ValueError):
    """The tenants file cannot be read or breaks the schema; the message names tenant and field."""


@dataclass(frozen=True, slots=True)
class Tenant:
    """One configured tenant.

    name: its configured name (a metric label). keys: bearer keys that name it.
    weight: fair share (> 0; VTC divides its cost by it). priority: band, higher first.
    rpm / tpm: requests / tokens per minute, or None for no limit.
    """

    name: str
    keys: tuple[str, ...] = ()
    weight: float = 1.0
    priority: int = 0
    rpm: int | None = None
    tpm: int | None = None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tenant(source: str, name: object, spec: object) -> Tenant:
    if not isinstance(name, str) or not name.strip():
        raise TenantsFileError(f"{source}: tenant names must be non-empty strings, got {name!r}")
    where = f"{source}: tenant {name!r}"
    if name.strip() == OTHER_LABEL:
        raise TenantsFileError(f"{where}: the name {OTHER_LABEL!r} is reserved (metrics label every unconfigured "
                               f"caller {OTHER_LABEL!r}); give this tenant another name")
    if not isinstance(spec, Mapping):
        raise TenantsFileError(f"{where}: expected a table/object of fields, got {type(spec).__name__}")
    unknown = sorted(set(spec) - set(_FIELDS))
    if unknown:
        raise TenantsFileError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; "
                               f"known: {', '.join(_FIELDS)}")
    keys = spec.get("keys", [])
    if not isinstance(keys, list) or not all(isinstance(k, str) and k.strip() for k in keys):
        raise TenantsFileError(f"{where}: field 'keys' must be a list of non-empty strings, got {keys!r}")
    weight = spec.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not (0 < weight < math.inf):
        raise TenantsFileError(f"{where}: field 'weight' must be a finite number > 0, got {weight!r}")
    priority = spec.get("priority", 0)
    if not _is_int(priority):
        raise TenantsFileError(f"{where}: field 'priority' must be an integer, got {priority!r}")
    limits: dict[str, int | None] = {}
    for field in ("rpm", "tpm"):
        value = spec.get(field)
        if value is not None and not (_is_int(value) and value > 0):
            raise TenantsFileError(f"{where}: field {field!r} must be a positive integer or null, got {value!r}")
        limits[field] = value
    return Tenant(name, tuple(k.strip() for k in keys), float(weight), priority, limits["rpm"], limits["tpm"])


class Tenants(Mapping[str, Tenant]):
    """The configured tenants, immutable: name → :class:`Tenant`, plus key → tenant.

    Build with :meth:`load` (a file) or :meth:`from_mapping` (a parsed document). Always contains
    ``default`` (configured or implicit). Raises :class:`TenantsFileError` for a bad document,
    including a key listed by two tenants (a key must name exactly one tenant).
    """

    __slots__ = ("path", "_tenants", "_by_key")

    def __init__(self, tenants: Mapping[str, Tenant], path: Path | None = None) -> None:
        table = dict(tenants)
        table.setdefault(DEFAULT_TENANT, Tenant(DEFAULT_TENANT))
        by_key: dict[str, Tenant] = {}
        for tenant in table.values():
            for key in tenant.keys:
                other = by_key.get(key)
                if other is not None and other.name != tenant.name:
                    # never echo the key itself: it is a secret
                    raise TenantsFileError(f"{path or '<tenants>'}: tenant {tenant.name!r}: field 'keys' lists "
                                           f"a key that tenant {other.name!r} lists too")
                by_key[key] = tenant
        self.path = path
        self._tenants: Mapping[str, Tenant] = MappingProxyType(table)
        self._by_key: Mapping[str, Tenant] = MappingProxyType(by_key)

    # -- building ------------------------------------------------------------------------------
    @classmethod
    def from_mapping(cls, document: object, *, source: str = "<tenants>", path: Path | None = None) -> Tenants:
        """Validate a parsed document (``{name: {field: value}}``) into a :class:`Tenants`."""
        if not isinstance(document, Mapping):
            raise TenantsFileError(f"{source}: the top level must map tenant names to tables, "
                                   f"got {type(document).__name__}")
        return cls({name: _tenant(source, name, spec) for name, spec in document.items()}, path)

    @classmethod
    def load(cls, path: str | Path) -> Tenants:
        """Read a ``.toml`` file (stdlib ``tomllib``) or JSON (any other suffix) and validate it."""
        file = Path(path)
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise TenantsFileError(f"{file}: cannot read the tenants file ({exc.strerror})") from exc
        try:
            document: Any = tomllib.loads(raw.decode()) if file.suffix.lower() == ".toml" else json.loads(raw)
        except (UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise TenantsFileError(f"{file}: not valid {'TOML' if file.suffix.lower() == '.toml' else 'JSON'}: "
                                   f"{exc}") from exc
        return cls.from_mapping(document, source=str(file), path=file)

    def reload(self) -> Tenants:
        """Read the same file again: a new :class:`Tenants`, or :class:`TenantsFileError` (the
        caller keeps this object in force). Pure: this object is never changed. For SIGHUP."""
        if self.path is None:
            raise TenantsFileError("<tenants>: built from a mapping, there is no file to reload")
        return Tenants.load(self.path)

    # -- Mapping -------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Tenant:
        return self._tenants[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tenants)

    def __len__(self) -> int:
        return len(self._tenants)

    # -- resolution ----------------------------------------------------------------------------
    @property
    def default(self) -> Tenant:
        """The tenant unknown callers share."""
        return self._tenants[DEFAULT_TENANT]

    @property
    def keys_configured(self) -> frozenset[str]:
        """Every bearer key some tenant lists (auth keys = these ∪ ``api_keys``)."""
        return frozenset(self._by_key)

    def for_key(self, key: str) -> Tenant | None:
        """The tenant a bearer key names, or None if no tenant lists it."""
        return self._by_key.get(key)

    def resolve(self, *, key: str | None = None, header: str | None = None, auth: bool) -> Tenant:
        """Who is calling (DESIGN §5).

        Auth on (``auth=True``): ``key`` is the authenticated bearer key; its tenant, or
        ``default`` for a key of ``api_keys`` no tenant lists. The header is ignored (a caller
        must not pick another tenant's share). Auth off: the ``x-rxpipe-tenant`` header value
        (stripped) if it names a configured tenant, else ``default``.
        """
        if auth:
            tenant = self._by_key.get(key) if key is not None else None
        else:
            tenant = self._tenants.get(header.strip()) if header is not None else None
        return tenant if tenant is not None else self.default

    def label(self, name: str) -> str:
        """Metric label for a tenant name: the name if configured (``default`` always is), else
        ``other``: label values stay a bounded set whatever callers send."""
        return name if name in self._tenants else OTHER_LABEL

    @property
    def weights(self) -> Mapping[str, float]:
        """name → weight, e.g. for ``ops.fair_queue(weight=...)``."""
        return MappingProxyType({name: t.weight for name, t in self._tenants.items()})

    def __repr__(self) -> str:
        return f"<Tenants {sorted(self._tenants)} from {self.path or 'a mapping'}>"
