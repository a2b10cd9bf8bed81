"""Structured logs: one JSON object per line, carrying the current request id and, while a
span is active, its trace_id and span_id."""

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


class RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = request_id_var.get()
        return True


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    """Routes every logger to stderr in the chosen format; idempotent."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RequestIdFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("grpc", "pymongo", "nats", "opensearch", "httpx", "urllib3"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
