"""One schema for every setting (DESIGN §6): the ``--set`` keys of every pipeline,
:class:`~rxpipe.gateway.GatewayConfig`, the brokers' :class:`~rxpipe.transport.TransportSettings`
(``RedisSettings``, ``NatsSettings``) and the engines' arguments are typed fields, checked one way.

A :class:`Setting` is one typed field: its name, default, type (``int``, ``number``, ``str``,
``bool``, or a named kind with its own parser), range, whether null is allowed, and what it is
(its doc, with units). A :class:`Schema` is an ordered set of settings: it resolves a
configuration (defaults, then every value checked; an unknown key is an error naming the known
ones), prints itself as a table (``rxpipe run FILE --help-settings``; the manual's settings tables
are generated from it), and shows the values that differ from their defaults with secrets hidden (the
start line of ``rxpipe run``).

One error class, :class:`SettingError` (a ``ValueError``), and one message shape, naming the
setting — never the class it feeds::

    setting max_num_seqs must be an integer >= 1, got 0 (int)
    SimulatedEngine(step_overhead_s=) must be a number >= 0, got -1 (int)      (a call's argument)

A bool is never a number (``--set key_rate=true`` must not become 1 request/s), a number is finite,
an integer is an ``int``, and a ``str`` setting takes a JSON integer as its text (``--set
api_keys=12345`` is the key ``"12345"``) but never ``true``.

Adding a setting
----------------
- a field of a config dataclass: one line, ``name: float = setting(1.0, "number", "what (s)",
  minimum=0, exclusive_minimum=True)``; ``__post_init__`` calls :func:`check_fields`, and every
  pipeline taking that dataclass's schema (:func:`schema_of`) has the field, in its table too;
- an engine's argument: one ``Setting(...)`` line in ``rxpipe/engines/_settings.py`` (its name also
  in ``SIMULATED_PIPELINE`` if the gateway pipelines take it, e.g. ``prefix_cache_blocks``: the
  pipelines build their engine from that list);
- a pipeline's own key: one ``Setting(...)`` line in the file's ``SETTINGS`` (``broker_url``, say).

Then regenerate the manual's tables (``docs/guides/settings.md``): ``python -m rxpipe._docsite``
(``tests/test_settings.py`` fails while they differ).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson

from .errors import RxPipeError
from .logs import public_url

__all__ = ["Setting", "Schema", "SettingError", "setting", "schema_of", "check_fields", "check_int",
           "check_number", "HIDDEN"]

#: how a secret setting is shown (start line, logs); an empty one is shown as is
HIDDEN = "(hidden)"
_KINDS = ("int", "number", "str", "bool")


class SettingError(RxPipeError, ValueError):
    """A setting of the wrong type or range, or an unknown one; one line naming the setting.

    ``key``: the setting's name when it is a named setting (a ``--set`` key, a config field), None
    for an argument of a call (the message names the call): ``rxpipe run`` prints the first kind
    as one line, the second with the location in the pipeline file.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def _bound(minimum: float | None, maximum: float | None, exclusive_minimum: bool) -> str:
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if exclusive_minimum else '>='} {minimum:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    return " and ".join(parts)


def _in_range(value: float, minimum: float | None, maximum: float | None, exclusive_minimum: bool) -> bool:
    if minimum is not None and (value <= minimum if exclusive_minimum else value < minimum):
        return False
    return maximum is None or value <= maximum


def _fail(subject: str, expected: str, value: Any, key: str | None) -> SettingError:
    return SettingError(f"{subject} must be {expected}, got {value!r} ({type(value).__name__})", key)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One typed setting.

    name: the key. default: its value when not given (None with ``nullable``). type: ``"int"``,
    ``"number"`` (int or float, finite), ``"str"``, ``"bool"``, or the name of a kind whose
    ``parse`` checks and normalizes a value (raising ValueError) and whose ``expected`` says what
    it takes. doc: what it is, with its unit. minimum / maximum: the range of a number (or int);
    ``exclusive_minimum``: ``> minimum`` instead of ``>=``. nullable: None (JSON null) allowed.
    choices: the strings allowed. allow_empty: a ``str`` may be ``""``. secret: shown as
    ``(hidden)`` (keys). default_text: how the table shows a computed default.
    """

    name: str
    default: Any
    type: str
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    nullable: bool = False
    choices: tuple[str, ...] | None = None
    allow_empty: bool = True
    secret: bool = False
    parse: Callable[[Any], Any] | None = None
    expected: str | None = None
    default_text: str | None = None

    def __post_init__(self) -> None:
        if self.type not in _KINDS and self.parse is None:
            raise ValueError(f"Setting {self.name!r}: type {self.type!r} needs a parse function")

    # -- checking --------------------------------------------------------------------------------
    def describe(self) -> str:
        """What it takes, e.g. ``an integer >= 1 or null`` (the ``must be ...`` of its errors)."""
        if self.expected is not None:
            text = self.expected
        elif self.type == "int":
            text = " ".join(filter(None, ("an integer", _bound(self.minimum, self.maximum, self.exclusive_minimum))))
        elif self.type == "number":
            text = " ".join(filter(None, ("a number", _bound(self.minimum, self.maximum, self.exclusive_minimum))))
        elif self.type == "bool":
            text = "true or false"
        elif self.choices is not None:
            text = "one of " + ", ".join(orjson.dumps(c).decode() for c in self.choices)
        else:
            text = "a string" if self.allow_empty else "a non-empty string"
        return f"{text} or null" if self.nullable else text

    def check(self, value: Any, where: str | None = None) -> Any:
        """``value`` checked (and normalized: a ``str`` setting's JSON integer becomes its text;
        a kind's ``parse`` may normalize); raises :class:`SettingError` naming ``where`` (default
        ``setting <name>``)."""
        subject = where or f"setting {self.name}"
        key = None if where else self.name
        if value is None:
            if self.nullable:
                return None
            raise _fail(subject, self.describe(), value, key)
        kind = self.type
        if self.parse is not None:
            try:
                return self.parse(value)
            except (TypeError, ValueError):
                raise _fail(subject, self.describe(), value, key) from None
        if kind == "int":
            ok = type(value) is int and _in_range(value, self.minimum, self.maximum, self.exclusive_minimum)
        elif kind == "number":
            ok = (type(value) in (int, float) and math.isfinite(value)
                  and _in_range(value, self.minimum, self.maximum, self.exclusive_minimum))
        elif kind == "bool":
            ok = type(value) is bool
        else:
            if type(value) is int:  # --set model=7: JSON made it a number; the text is what was meant
                value = str(value)
            ok = isinstance(value, str) and (self.allow_empty or bool(value.strip())) and (
                self.choices is None or value in self.choices)
        if not ok:
            raise _fail(subject, self.describe(), value, key)
        return value

    # -- showing -----------------------------------------------------------------------------------
    def shown(self, value: Any) -> Any:
        """``value`` as logs show it: a secret as ``(hidden)`` (an empty one as is), a URL
        without its password."""
        if self.secret and value not in (None, "", (), []):
            return HIDDEN
        if isinstance(value, str) and "://" in value:
            return public_url(value)
        return value

    def type_text(self) -> str:
        """The table's type column, e.g. ``int >= 1``, ``number > 0 or null``."""
        if self.expected is not None:
            base = self.type
        elif self.type in ("int", "number"):
            base = " ".join(filter(None, (self.type, _bound(self.minimum, self.maximum, self.exclusive_minimum))))
        elif self.type == "str" and self.choices is not None:
            base = " | ".join(orjson.dumps(c).decode() for c in self.choices)
        elif self.type == "str":
            base = "string" if self.allow_empty else "non-empty string"
        else:
            base = self.type
        return f"{base} or null" if self.nullable else base

    def default_json(self) -> str:
        """The default as JSON (what ``--set`` would take), or ``default_text``."""
        if self.default_text is not None:
            return self.default_text
        return orjson.dumps(self.default).decode()


class Schema(Mapping[str, Setting]):
    """An ordered set of :class:`Setting` (a Mapping name → Setting).

    Built from settings and other schemas (``Schema(EDGE, Setting(...), ...)``); a name twice is
    a ValueError. :meth:`pick`, :meth:`without`, :meth:`replace` and :meth:`rename` make new ones.
    """

    __slots__ = ("_settings",)

    def __init__(self, *parts: Setting | Iterable[Setting]) -> None:
        table: dict[str, Setting] = {}
        for part in parts:
            for item in ([part] if isinstance(part, Setting) else list(part.values() if isinstance(part, Schema)
                                                                        else part)):
                if item.name in table:
                    raise ValueError(f"setting {item.name!r} is in the schema twice")
                table[item.name] = item
        self._settings = table

    # -- Mapping -----------------------------------------------------------------------------------
    def __getitem__(self, name: str) -> Setting:
        return self._settings[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._settings)

    def __len__(self) -> int:
        return len(self._settings)

    def __repr__(self) -> str:
        return f"<Schema {', '.join(self._settings)}>"

    # -- deriving ------------------------------------------------------------------------------------
    def pick(self, *names: str) -> Schema:
        """The settings ``names``, in that order (KeyError for a name not here)."""
        return Schema(*(self._settings[name] for name in names))

    def without(self, *names: str) -> Schema:
        missing = set(names) - set(self._settings)
        if missing:
            raise KeyError(f"no setting(s) {', '.join(sorted(missing))} to leave out")
        return Schema(*(s for name, s in self._settings.items() if name not in names))

    def replace(self, key: str, /, **changes: Any) -> Schema:
        """The same schema with setting ``key`` changed (``default=``, ``doc=`` ...; ``name=``
        renames it)."""
        if key not in self._settings:
            raise KeyError(f"no setting {key!r} to replace")
        return Schema(*(dataclasses.replace(s, **changes) if s.name == key else s for s in self._settings.values()))

    def rename(self, key: str, new: str) -> Schema:
        """Setting ``key`` called ``new`` here (a pipeline's ``redis_url`` is RedisSettings' ``url``)."""
        return self.replace(key, name=new)

    # -- values ------------------------------------------------------------------------------------
    def defaults(self) -> dict[str, Any]:
        return {name: s.default for name, s in self._settings.items()}

    def check(self, name: str, value: Any, where: str | None = None) -> Any:
        """``value`` checked by setting ``name`` (see :meth:`Setting.check`)."""
        return self._settings[name].check(value, where)

    def resolve(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Every setting: its value in ``config``, else its default; each checked. Raises
        :class:`SettingError` for an unknown key (naming the known ones, and the closest one as
        "did you mean", after :func:`difflib.get_close_matches`) or a bad value."""
        unknown = sorted(set(config) - set(self._settings))
        if unknown:
            guesses = {name: difflib.get_close_matches(name, self._settings, n=1) for name in unknown}
            hint = "; ".join(f"{name}: did you mean {guess[0]}?" for name, guess in guesses.items() if guess)
            raise SettingError(f"unknown setting(s) {', '.join(unknown)}{' (' + hint + ')' if hint else ''}; "
                               f"known: {', '.join(self._settings)} (rxpipe run FILE --help-settings lists them)",
                               unknown[0])
        return {name: s.check(config[name]) if name in config else s.default for name, s in self._settings.items()}

    def shown(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` (of this schema's keys) as logs show them: secrets hidden."""
        return {name: self._settings[name].shown(v) if name in self._settings else v for name, v in values.items()}

    def changed(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The values of ``config`` that differ from their defaults, as logs show them."""
        changed = {}
        for name, value in config.items():
            s = self._settings.get(name)
            if s is None:
                continue
            try:
                same = s.check(value) == s.default
            except SettingError:
                same = False
            if not same:
                changed[name] = s.shown(value)  # as given (a list its parser makes is not what was typed)
        return changed

    # -- the table ---------------------------------------------------------------------------------
    def table(self, fmt: str = "text") -> str:
        """The settings as a table: ``"markdown"`` (the manual's tables) or ``"text"`` (aligned columns)."""
        rows = [(name, s.type_text(), s.default_json(), s.doc) for name, s in self._settings.items()]
        if fmt == "markdown":
            lines = ["| setting | type | default | meaning |", "|---|---|---|---|"]
            lines += [f"| `{n}` | {t} | `{d}` | {_cell(doc)} |" for n, t, d, doc in rows]
            return "\n".join(lines) + "\n"
        if fmt != "text":
            raise ValueError(f"table format must be text or markdown, got {fmt!r}")
        header = ("setting", "type", "default", "meaning")
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
        return "".join(f"{n:<{widths[0]}}  {t:<{widths[1]}}  {d:<{widths[2]}}  {doc}".rstrip() + "\n"
                       for n, t, d, doc in [header, *rows])


def _cell(text: str) -> str:
    """``text`` in a Markdown table cell (a ``|`` escaped)."""
    return text.replace("|", "\\|")


# -- dataclasses ---------------------------------------------------------------------------------
_KEY = "rxpipe.setting"


def setting(default: Any = dataclasses.MISSING, type: str = "str", doc: str = "", *,  # noqa: A002
            default_factory: Callable[[], Any] | None = None, **options: Any) -> Any:
    """A dataclass field that is a :class:`Setting` (its name is the field's): ``key_burst: int =
    setting(10, "int", "per-key bucket size (requests)", minimum=1)``. With ``default_factory``
    the table shows ``options["default_text"]``."""
    spec = Setting("", None if default is dataclasses.MISSING else default, type, doc, **options)
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata={_KEY: spec})
    return dataclasses.field(default=default, metadata={_KEY: spec})


def schema_of(cls: type) -> Schema:
    """The :class:`Schema` of a dataclass's :func:`setting` fields, in field order (cached)."""
    cached = cls.__dict__.get("_rxpipe_schema")
    if isinstance(cached, Schema):
        return cached
    schema = Schema(*(dataclasses.replace(f.metadata[_KEY], name=f.name) for f in dataclasses.fields(cls)
                      if _KEY in f.metadata))
    cls._rxpipe_schema = schema  # type: ignore[attr-defined]
    return schema


def check_fields(obj: Any) -> None:
    """Check every :func:`setting` field of the dataclass ``obj`` (from its ``__post_init__``),
    storing normalized values back (frozen dataclasses too). Raises :class:`SettingError`."""
    for name, spec in schema_of(type(obj)).items():
        value = getattr(obj, name)
        checked = spec.check(value)
        if checked is not value:
            object.__setattr__(obj, name, checked)


# -- arguments of calls (operators, engines) --------------------------------------------------------
def check_int(value: Any, subject: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` if it is an ``int`` (never a bool) in range, else :class:`SettingError` naming
    ``subject`` (e.g. ``buffer(capacity)``)."""
    return Setting("", None, "int", "", minimum=minimum, maximum=maximum).check(value, subject)  # type: ignore[no-any-return]


def check_number(value: Any, subject: str, *, minimum: float | None = None, maximum: float | None = None,
                 exclusive_minimum: bool = False, nullable: bool = False) -> Any:
    """``value`` if it is a finite int or float (never a bool) in range (None with
    ``nullable``), else :class:`SettingError` naming ``subject``."""
    return Setting("", None, "number", "", minimum=minimum, maximum=maximum, exclusive_minimum=exclusive_minimum,
                   nullable=nullable).check(value, subject)
