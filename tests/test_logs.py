"""Structured logs: JSON lines off a terminal, and no secret ever reaches them."""

from __future__ import annotations

import io
import json

import structlog

from wheeld import logs


def test_json_lines_with_secrets_blanked() -> None:
    out = io.StringIO()
    logs.configure("info", "json", stream=out)
    try:
        logs.get().bind(table="T1").warning(
            "connecting", password="hunter2", mqtt_password="x", key_file="/k", host="h"
        )
        logs.get().debug("hidden at info level")
    finally:
        structlog.reset_defaults()
    (line,) = out.getvalue().splitlines()
    record = json.loads(line)
    assert record["event"] == "connecting" and record["table"] == "T1"
    assert record["password"] == record["mqtt_password"] == record["key_file"] == "***"
    assert record["host"] == "h" and record["level"] == "warning"
    assert "hunter2" not in out.getvalue()


def test_redact_leaves_other_fields_alone() -> None:
    event = {"event": "x", "token_count": 3, "port": 1883}
    assert logs.redact(None, "info", event) == {"event": "x", "token_count": "***", "port": 1883}
