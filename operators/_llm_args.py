"""Argument checks shared by the operators for LLM pipelines (DESIGN §3, "beyond RxPY").

Every check raises at the factory call, naming the operator and the argument, so a bad bound
never reaches a running stream. Durations are seconds or ``datetime.timedelta`` (``as_seconds``).
"""

from __future__ import annotations

import math
from typing import Any

from rxpipe._durations import as_seconds
from rxpipe.settings import check_int

__all__ = ["seconds_arg", "count_arg", "callable_arg"]


def seconds_arg(op: str, arg: str, value: object, *, zero: bool = False) -> float:
    """``value`` as float seconds: an int, a float or a ``timedelta``, finite and > 0 (>= 0
    with ``zero``). TypeError for another type, ValueError out of range."""
    value = as_seconds(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{op}({arg}) needs seconds (a number or a datetime.timedelta), got {value!r}")
    low_ok = value >= 0 if zero else value > 0
    if not low_ok or math.isinf(value) or math.isnan(value):
        raise ValueError(f"{op}({arg}) needs a finite number of seconds {'>=' if zero else '>'} 0, got {value!r}")
    return float(value)


def count_arg(op: str, arg: str, value: object, minimum: int = 1) -> int:
    """``value`` if it is an int >= ``minimum`` (never a bool): else a SettingError (ValueError)."""
    return check_int(value, f"{op}({arg})", minimum=minimum)


def callable_arg(op: str, arg: str, fn: Any, *, optional: bool = False) -> Any:
    """``fn`` if it is callable (or None with ``optional``), else TypeError."""
    if fn is None and optional:
        return None
    if not callable(fn):
        raise TypeError(f"{op}({arg}) needs a callable, got {fn!r}")
    return fn
