"""Argument checks shared by the operator families: one wording for every factory's errors.

``ABSENT`` marks an argument not given where None is a value; :func:`either` takes an argument
under reactivex's name or rxpipe's (DESIGN §3, "RxPY names"); the ``check_*`` functions raise
TypeError / ValueError (``SettingError`` for ints and numbers) naming the operator and argument.
"""

from __future__ import annotations

from typing import Any

from rxpipe._durations import as_seconds
from rxpipe._protocol import UNBOUNDED
from rxpipe.flowable import Flowable
from rxpipe.settings import check_int, check_number
from rxpipe.stage import Stage

__all__ = ["ABSENT", "DEFAULT_INNER_PREFETCH", "either", "required", "identity", "check_callable", "check_count",
           "check_int_arg", "check_positive", "check_optional_callable", "check_reducer_prefetch",
           "check_sources", "check_duration"]

#: "not given" for an argument that has a reactivex name and an rxpipe name (None can be a value)
ABSENT: Any = Stage.NOTHING


def either(op: str, rx_name: str, rx_value: Any, our_name: str, our_value: Any) -> Any:
    """One argument under reactivex's name or rxpipe's (DESIGN §3 "RxPY names"); both: TypeError."""
    if our_value is ABSENT:
        return rx_value
    if rx_value is not ABSENT and rx_value is not None:
        raise TypeError(f"{op}() got {rx_name}= and {our_name}=, two names of one argument: give one")
    return our_value


def required(op: str, rx_name: str, value: Any) -> Any:
    if value is ABSENT:
        raise TypeError(f"{op}() missing its argument {rx_name!r}")
    return value


def identity(x: Any) -> Any:
    return x


def check_callable(op: str, fn: object, arg: str | None = None) -> None:
    """``fn`` must be callable: TypeError naming ``op`` (and ``arg`` when the factory takes several)."""
    if not callable(fn):
        raise TypeError(f"{op}({arg or ''}) needs a callable, got {fn!r}")


def check_count(op: str, n: object) -> None:
    check_int(n, f"{op}(n)", minimum=0)


def check_int_arg(op: str, arg: str, value: object, minimum: int) -> None:
    """``op(arg)`` must be an int >= ``minimum`` (never a bool): :class:`~rxpipe.settings.SettingError`."""
    check_int(value, f"{op}({arg})", minimum=minimum)


def check_positive(op: str, arg: str, value: object) -> None:
    """``op(arg)`` must be a finite number > 0 (seconds, a rate, a weight; never a bool)."""
    check_number(value, f"{op}({arg})", minimum=0, exclusive_minimum=True)


def check_optional_callable(op: str, arg: str, fn: object) -> None:
    if fn is not None and not callable(fn):
        raise TypeError(f"{op}({arg}=) needs a callable or None, got {fn!r}")


def check_reducer_prefetch(op: str, prefetch: object) -> int:
    check_int_arg(op, "prefetch", prefetch, 1)
    if prefetch >= UNBOUNDED:  # type: ignore[operator]
        raise ValueError(f"{op}(prefetch) must be a finite window of items: a reducer never requests "
                         f"UNBOUNDED (DESIGN §3)")
    return prefetch  # type: ignore[return-value]


#: Items each source of ``zip`` / ``combine_latest`` and each inner stream of ``flat_map`` may have
#: requested and not yet delivered downstream (Reactor's ``Queues.XS_BUFFER_SIZE``).
DEFAULT_INNER_PREFETCH = 32


def check_sources(op: str, others: tuple[Any, ...]) -> None:
    for other in others:
        if not isinstance(other, Flowable):
            raise TypeError(f"{op}() needs Flowables, got {other!r}")


def check_duration(op: str, arg: str, value: object, *, zero: bool = False) -> float:
    """Seconds on the loop's clock: a finite int or float or a ``timedelta``, > 0 (>= 0 with
    ``zero``); returned as a float of seconds."""
    value = as_seconds(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        hint = (" (seconds on the loop's clock or a datetime.timedelta; an absolute datetime is not "
                "supported: pass the delay)") if hasattr(value, "tzinfo") else ""
        raise TypeError(f"{op}({arg}) needs a number of seconds, got {value!r}{hint}")
    if not (0 <= value if zero else 0 < value) or not value < float("inf"):
        raise ValueError(f"{op}({arg}) needs a finite number of seconds {'>=' if zero else '>'} 0, got {value!r}")
    return float(value)
