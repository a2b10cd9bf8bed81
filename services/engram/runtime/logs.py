"""Logs: one JSON object per line (servers), carrying the current request id and, while a
span is active, its trace_id and span_id; or one short text line for a terminal (`engram dev`),
with the record's extra fields as `key=value`."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from engram.runtime.context import request_id_var
from engram.runtime.tracing import log_ids

_RESERVED = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": getattr(record, "request_id", request_id_var.get()),
            **log_ids(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and key != "request_id":
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`HH:MM:SS level logger: message key=value ...`: the fields a JSON line would carry,
    short enough to read in a terminal (the request id only inside a call)."""

    def __init__(self) -> None:
        super().__init__(datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        fields = {
            key: value
            for key, value in vars(record).items()
            if key not in _RESERVED and key != "request_id"
        }
        request_id = getattr(record, "request_id", request_id_var.get())
        if request_id and request_id != "-":
            fields = {"request_id": request_id, **fields}
        line = (
            f"{self.formatTime(record, self.datefmt)} {record.levelname.lower()} "
            f"{record.name}: {record.getMessage()}"
        )
        if fields:
            line += " " + " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: object) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    text = str(value)
    return json.dumps(text, ensure_ascii=False) if (not text or " " in text) else text


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    """Routes every logger to stderr in the chosen format; idempotent."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("grpc", "pymongo", "nats", "opensearch", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
