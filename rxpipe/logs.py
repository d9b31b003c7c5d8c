"""Logging of the ``rxpipe`` command line: levels, text or JSON lines, and the access log.

rxpipe's modules log through the standard :mod:`logging` library under the ``rxpipe`` logger
tree (``rxpipe``, ``rxpipe.gateway``, ``rxpipe.engine``, ``rxpipe.transport``, ``rxpipe.redis``,
``rxpipe.nats``, ``rxpipe.access``) and never configure it themselves: a process that embeds
rxpipe keeps its own configuration (Python's logging HOWTO, "Configuring Logging for a Library").
Only ``rxpipe run`` calls :func:`configure_logging`, which installs one handler on the root
logger, writing to stderr:

- ``text``: ``2025-06-01 12:00:00.123 INFO rxpipe.engine: message key=value ...``, one line
  per record (a traceback, if any, follows on its own lines);
- ``json``: one JSON object per line (orjson), ``{"time", "level", "logger", "message", ...}``
  plus the record's fields (below) and ``"exception"`` with a traceback.

Fields: a record may carry structured data as ``extra={"fields": {...}}`` (see :func:`event`);
the JSON format adds them as keys of the object; the text format appends them as ``key=value``
(except for :func:`event`'s, whose message already says it all). Keys and
prompts are never among them: callers pass only names, counts, durations and public URLs.

The access log (``rxpipe run --access-log``; off by default) is the logger ``rxpipe.access``:
one INFO record per HTTP request to a completion route, written by the gateway when its
``access_log`` attribute is True (see :class:`~rxpipe.gateway.Gateway`).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import orjson

__all__ = ["LOG_LEVELS", "LOG_FORMATS", "ACCESS_LOG", "configure_logging", "event", "public_url", "TextFormatter",
           "JSONFormatter"]

#: ``--log-level`` choices, lowest first
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: ``--log-format`` choices
LOG_FORMATS = ("text", "json")
#: the access log's logger: one INFO record per completion request (``rxpipe run --access-log``)
ACCESS_LOG = logging.getLogger("rxpipe.access")


def event(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    """Log ``message`` (already formatted: state transitions are rare) with ``fields`` as
    structured data (``key=value`` in text, keys in JSON). Costs one level check when the
    level is disabled."""
    if logger.isEnabledFor(level):
        # the message says it all in text: the fields are for JSON
        logger.log(level, message, extra={"fields": fields, "text_fields": False}, stacklevel=2)


def public_url(url: str) -> str:
    """``url`` without its password (``redis://user:secret@host:6379/0`` →
    ``redis://user@host:6379/0``), for logs and the start line."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{parts.username + '@' if parts.username else ''}{host}{':' + str(parts.port) if parts.port else ''}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = getattr(record, "fields", None)
    return fields if isinstance(fields, dict) else {}


def _timestamp(record: logging.LogRecord) -> str:
    seconds = int(record.created)
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(seconds))}.{int(record.msecs):03d}"


def _text_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str):
        return value if value and " " not in value and "=" not in value else orjson.dumps(value).decode()
    if isinstance(value, (dict, list, tuple)):
        return orjson.dumps(value, default=str).decode()
    return str(value)


class TextFormatter(logging.Formatter):
    """``<local time with ms> <LEVEL> <logger>: <message> key=value ...`` (values with spaces are
    JSON-quoted), then the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_timestamp(record)} {record.levelname} {record.name}: {record.getMessage()}"
        fields = _fields(record) if getattr(record, "text_fields", True) else None
        if fields:
            line += " " + " ".join(f"{key}={_text_value(value)}" for key, value in fields.items()
                                   if value is not None)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        elif record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JSONFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (ISO 8601, local, ms), ``level``, ``logger``,
    ``message``, the record's fields, and ``exception`` (the traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        seconds = int(record.created)
        zone = time.strftime("%z", time.localtime(seconds))
        doc: dict[str, Any] = {
            "time": f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(seconds))}.{int(record.msecs):03d}"
                    f"{zone[:3]}:{zone[3:]}",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            if key not in doc:
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def configure_logging(level: str = "info", fmt: str = "text", stream: IO[str] | None = None) -> logging.Handler:
    """Send every record at ``level`` or above to ``stream`` (default stderr) in ``fmt``
    (``"text"`` or ``"json"``), through one handler on the root logger (replacing any handler a
    previous call installed). For the command line only; returns the handler.

    Raises ValueError for an unknown level or format.
    """
    if level not in LOG_LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, got {fmt!r}")
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "_rxpipe", False)]:
        root.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    handler._rxpipe = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    return handler
