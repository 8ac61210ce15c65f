"""The contract as files: an AsyncAPI 3.0.0 document and a JSON Schema per payload.

Built from the registry (``wheeld.contract.registry``) and the models it names:
``docs/api/asyncapi.json`` names every channel
(``{base}`` is a channel parameter), what wheeld sends and receives on it,
with QoS and retain in the MQTT bindings, and points each message at its
payload's schema in ``docs/api/schemas/`` (JSON Schema 2020-12, from
``model_json_schema()``). JSON is valid YAML, so no YAML library is needed;
keys are sorted, so the same models always give the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from wheeld.contract.registry import COMMANDS, REFUSED_FILE, TOPICS
from wheeld.core.messages import SCHEMA_VERSION

ASYNCAPI_FILE = "asyncapi.json"
SCHEMA_DIR = "schemas"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: How AsyncAPI 3 is told the payload schemas are JSON Schema 2020-12, not its own dialect.
SCHEMA_FORMAT = "application/schema+json;version=draft-2020-12"
MQTT_BINDING_VERSION = "0.2.0"
#: The command that rewrites the files, for the test that finds them stale to name.
REGENERATE = "python -m wheeld.contract"


def _tidy(schema: Any) -> Any:
    """A generated schema without pydantic's ``"default": null`` on members that are
    never null (absent instead), and with Markdown's backticks for reStructuredText's."""
    if isinstance(schema, list):
        return [_tidy(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _tidy(value) for key, value in schema.items()}
    if "default" in out and out["default"] is None and not _admits_null(out):
        del out["default"]
    if isinstance(out.get("description"), str):
        out["description"] = out["description"].replace("``", "`")
    return out


def _admits_null(schema: dict[str, Any]) -> bool:
    if schema.get("type") == "null":
        return True
    return any(_admits_null(option) for option in schema.get("anyOf", []))


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema 2020-12, as written to ``schemas/``."""
    schema = _tidy(model.model_json_schema())
    return {"$schema": JSON_SCHEMA_DIALECT, **schema}


def _message(name: str, model: type[BaseModel], schema_file: str) -> dict[str, Any]:
    summary = (model.__doc__ or name).strip().splitlines()[0].replace("``", "`")
    return {
        "name": name,
        "title": model.__name__,
        "summary": summary,
        "contentType": "application/json",
        "payload": {"schemaFormat": SCHEMA_FORMAT, "schema": {"$ref": schema_file}},
        "bindings": {
            "mqtt": {
                "contentType": "application/json",
                "payloadFormatIndicator": 1,
                "bindingVersion": MQTT_BINDING_VERSION,
            }
        },
    }


def _operation_binding(*, qos: int, retain: bool) -> dict[str, Any]:
    return {"mqtt": {"qos": qos, "retain": retain, "bindingVersion": MQTT_BINDING_VERSION}}


def _ref(*path: str) -> dict[str, str]:
    return {"$ref": "#/" + "/".join(path)}


def build() -> dict[str, str]:
    """Every file of the contract: its path under ``docs/api/`` and its text."""
    files: dict[str, str] = {}
    messages: dict[str, Any] = {}
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    base = {"base": _ref("components", "parameters", "base")}

    def schema_file(name: str, model: type[BaseModel]) -> str:
        path = f"{SCHEMA_DIR}/{name}.json"
        files[path] = _dump(json_schema(model))
        return f"./{path}"

    for topic, said in TOPICS.items():
        model = said.model()
        retained = said.retain
        messages[topic] = _message(topic, model, schema_file(topic, model))
        channels[topic] = {
            "address": said.address("{base}"),
            "title": said.address("<base>"),
            "description": said.doc,
            "parameters": base,
            "messages": {topic: _ref("components", "messages", topic)},
        }
        operations[f"publish_{topic}"] = {
            "action": "send",
            "title": f"wheeld publishes <base>/{topic}" + (" (retained)" if retained else ""),
            "channel": _ref("channels", topic),
            "messages": [_ref("channels", topic, "messages", topic)],
            "bindings": _operation_binding(qos=said.qos, retain=retained),
        }

    replies: dict[str, Any] = {}
    for obeyed in COMMANDS.values():
        for name, reply in zip((obeyed.reply_file, REFUSED_FILE), obeyed.replies(), strict=True):
            if name not in replies:
                messages[name] = _reply_message(name, reply, schema_file(name, reply))
                replies[name] = _ref("components", "messages", name)
    channels["reply"] = {
        "address": None,
        "title": "the requester's response topic",
        "description": "Where a command's reply goes: the MQTT 5 response topic, or the "
        "command's reply_to; never under <base>/, a $ topic or a filter, and, when "
        "mqtt.reply_prefix is set (it is empty by default), under it with at least one more "
        "level.",
        "messages": replies,
    }

    for command, obeyed in COMMANDS.items():
        model = obeyed.model()
        channel = f"command_{command}"
        message = f"command_{command}"
        messages[message] = _command_message(
            command, model, schema_file(f"command-{command}", model)
        )
        channels[channel] = {
            "address": obeyed.address("{base}"),
            "title": obeyed.address("<base>"),
            "description": "An operator command (never retained: a retained one is neither "
            "obeyed nor answered). Every command, carried out or refused, is journaled with "
            "who sent it.",
            "parameters": base,
            "messages": {message: _ref("components", "messages", message)},
        }
        operations[f"receive_{command}"] = {
            "action": "receive",
            "title": f"wheeld obeys <base>/command/{command}",
            "channel": _ref("channels", channel),
            "messages": [_ref("channels", channel, "messages", message)],
            "bindings": _operation_binding(qos=1, retain=False),
            "reply": {
                "address": {
                    "location": "$message.payload#/reply_to",
                    "description": "the command's reply_to or its MQTT 5 response "
                    "topic; no reply without one",
                },
                "channel": _ref("channels", "reply"),
                "messages": [
                    _ref("channels", "reply", "messages", name)
                    for name in (obeyed.reply_file, REFUSED_FILE)
                ],
            },
        }

    document = {
        "asyncapi": "3.0.0",
        "id": "urn:wheeld:mqtt",
        "info": {
            "title": "wheeld",
            "version": str(SCHEMA_VERSION),
            "description": "The MQTT interface of wheeld, the controller daemon of an "
            "electronic roulette wheel: one table's results, state and alarms out, operator "
            "commands in. Every payload is a JSON object carrying schema_version (this "
            "document's version); docs/api.md says how it changes.",
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {
            "parameters": {
                "base": {
                    "description": "mqtt.base_topic (default wheeld/<table.id>); it may hold "
                    "several topic levels",
                    "examples": ["wheeld/T1"],
                }
            },
            "messages": messages,
        },
    }
    files[ASYNCAPI_FILE] = _dump(document)
    return dict(sorted(files.items()))


def _command_message(name: str, model: type[BaseModel], schema_file: str) -> dict[str, Any]:
    message = _message(name, model, schema_file)
    message["correlationId"] = {
        "location": "$message.payload#/correlation_id",
        "description": "echoed in the reply; with MQTT 5 the correlation data is echoed too",
    }
    message["bindings"]["mqtt"]["responseTopic"] = {
        "type": "string",
        "description": "MQTT 5: where to reply (under mqtt.reply_prefix when it is set)",
    }
    message["bindings"]["mqtt"]["correlationData"] = {
        "type": "string",
        "description": "MQTT 5: echoed in the reply's properties",
    }
    return message


def _reply_message(name: str, model: type[BaseModel], schema_file: str) -> dict[str, Any]:
    message = _message(name, model, schema_file)
    message["correlationId"] = {"location": "$message.payload#/correlation_id"}
    return message


def _dump(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write(directory: Path) -> list[Path]:
    """Write the contract under ``directory``; a schema no model makes any more is removed."""
    files = build()
    (directory / SCHEMA_DIR).mkdir(parents=True, exist_ok=True)
    for old in (directory / SCHEMA_DIR).glob("*.json"):
        if f"{SCHEMA_DIR}/{old.name}" not in files:
            old.unlink()
    written = []
    for name, text in files.items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def stale(directory: Path) -> list[str]:
    """The files under ``directory`` that differ from what the models give, missing or extra."""
    files = build()
    found = {f"{SCHEMA_DIR}/{p.name}" for p in (directory / SCHEMA_DIR).glob("*.json")}
    if (directory / ASYNCAPI_FILE).exists():
        found.add(ASYNCAPI_FILE)
    out = sorted(found - set(files))
    for name, text in files.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            out.append(name)
    return out
