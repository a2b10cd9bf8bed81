"""The two log formats: JSON lines for servers, short text lines for a terminal."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from engram.runtime.context import request_id_var
from engram.runtime.logs import JsonFormatter, TextFormatter

pytestmark = pytest.mark.unit


def record(msg: str = "serving", **extra: object) -> logging.LogRecord:
    made = logging.makeLogRecord(
        {"name": "engram.runtime.server", "levelname": "INFO", "msg": msg, "created": 0.0}
    )
    for key, value in extra.items():
        setattr(made, key, value)
    return made


def test_text_lines_carry_the_extra_fields_as_key_value() -> None:
    line = TextFormatter().format(
        record(addr="127.0.0.1:50051", services=["a.S", "b.T"], note="two words")
    )
    time_of_day, rest = line.split(" ", 1)
    assert len(time_of_day) == 8 and time_of_day.count(":") == 2
    assert rest == (
        'info engram.runtime.server: serving addr=127.0.0.1:50051 services=a.S,b.T note="two words"'
    )


def test_text_lines_name_the_request_only_inside_a_call() -> None:
    assert "request_id" not in TextFormatter().format(record())
    token = request_id_var.set("r-42")
    try:
        assert TextFormatter().format(record()).endswith("serving request_id=r-42")
    finally:
        request_id_var.reset(token)


def test_text_lines_keep_the_traceback() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        failed = record("failed")
        failed.exc_info = sys.exc_info()
    lines = TextFormatter().format(failed).splitlines()
    assert lines[0].endswith("failed") and lines[-1] == "ValueError: boom"


def test_json_lines_are_one_object_with_the_same_fields() -> None:
    entry = json.loads(JsonFormatter().format(record(addr="127.0.0.1:1")))
    assert (entry["level"], entry["msg"], entry["addr"]) == ("info", "serving", "127.0.0.1:1")
