"""Broker adapters found by URL scheme (DESIGN §1, §8).

An adapter registers itself when its package is imported (:func:`register_broker`); the
interface never imports an adapter. The adapters rxpipe ships are known by name only
(:data:`BUILTIN_ADAPTERS`: scheme prefixes → the module that registers them) and imported on first
use, so ``import rxpipe.transport`` loads neither redis-py nor nats-py, and a third-party adapter
plugs in the same way by registering its schemes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..flowable import Flowable

if TYPE_CHECKING:
    from .source import WorkerSource

__all__ = ["BrokerAdapter", "register_broker", "adapter_for", "BUILTIN_ADAPTERS", "known_schemes"]


@dataclass(frozen=True)
class BrokerAdapter:
    """What one broker adapter provides to :mod:`rxpipe.transport`.

    name: the broker's name (``"redis"``, stage names ``<name>_sink`` / ``<name>_source``);
    schemes: the URL prefixes it serves (``("redis://", "rediss://", "unix://")``);
    settings: its settings class (a :class:`~rxpipe.transport.TransportSettings` subclass), called
        with ``url=`` and the other settings as keywords;
    sink: ``sink(source, settings, name)`` → the gateway side (a
        :class:`~rxpipe.transport.TransportSink`);
    source: ``source(settings, max_unacked, pause_s, name)`` → the worker side (a
        :class:`~rxpipe.transport.WorkerSource`).
    """

    name: str
    schemes: tuple[str, ...]
    settings: Callable[..., Any]
    sink: Callable[[Flowable[Any], Any, str | None], Flowable[Any]]
    source: Callable[[Any, int | None, Callable[[], float] | None, str | None], WorkerSource]


#: the adapters that ship with rxpipe: their URL prefixes and the module whose import registers them
BUILTIN_ADAPTERS: dict[str, tuple[tuple[str, ...], str]] = {
    "redis": (("redis://", "rediss://", "unix://"), "rxpipe.redis"),
    "nats": (("nats://", "tls://"), "rxpipe.nats"),
    # the ends, not rxpipe.kafka itself: its settings import without aiokafka
    "kafka": (("kafka://",), "rxpipe.kafka._ends"),
}

_REGISTERED: dict[str, BrokerAdapter] = {}


def register_broker(adapter: BrokerAdapter) -> None:
    """Make ``adapter`` serve its URL schemes (a later registration of the same name replaces it).
    Raises ValueError when one of its schemes is served by an adapter of another name."""
    for other in _REGISTERED.values():
        clash = set(other.schemes) & set(adapter.schemes)
        if other.name != adapter.name and clash:
            raise ValueError(f"broker {adapter.name!r}: {sorted(clash)} already served by {other.name!r}")
    _REGISTERED[adapter.name] = adapter


def known_schemes() -> tuple[str, ...]:
    """Every URL prefix a broker adapter serves or would serve once imported."""
    schemes = [scheme for prefixes, _ in BUILTIN_ADAPTERS.values() for scheme in prefixes]
    schemes += [scheme for adapter in _REGISTERED.values() for scheme in adapter.schemes if scheme not in schemes]
    return tuple(schemes)


def adapter_for(url: str) -> BrokerAdapter:
    """The adapter serving ``url``'s scheme, importing a built-in one on first use. Raises
    ValueError for a URL no adapter serves (naming the schemes that are), ImportError when a
    built-in adapter's client library is missing (naming the extra to install)."""
    if not isinstance(url, str):
        raise ValueError(f"broker_url must be a string, got {url!r}")
    for adapter in _REGISTERED.values():
        if url.startswith(adapter.schemes):
            return adapter
    for name, (prefixes, module) in BUILTIN_ADAPTERS.items():
        if url.startswith(prefixes):
            try:
                importlib.import_module(module)
            except ImportError as error:
                raise ImportError(f"broker_url {url!r} needs the {name!r} extra: pip install -e '.[{name}]' "
                                  f"({error})") from error
            if name in _REGISTERED:
                return _REGISTERED[name]
            raise ValueError(f"{module} did not register the broker adapter {name!r}")
    raise ValueError(f"broker_url {url!r} names no supported broker (schemes: {', '.join(known_schemes())})")
