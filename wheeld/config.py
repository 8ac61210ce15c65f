"""The configuration file (TOML) read into pydantic models.

Unknown keys are errors, never silent defaults; every problem is reported with
the dotted key it belongs to, all at once.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from wheeld.rules import RulesConfig

DRIVER_NAMES = ("wrp", "cammegh-ss2")


class ConfigError(Exception):
    """A configuration that cannot be used; ``problems`` holds one line per key."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


def check_topic_segment(value: str) -> str:
    """MQTT topic levels may not hold wildcards, separators or be empty."""
    if not value or any(char in value for char in "+#/\0"):
        raise ValueError("must be a non-empty MQTT topic level without '+', '#', '/' or NUL")
    return value


def check_topic(value: str) -> str:
    """A topic for publishing: levels without wildcards and none empty."""
    for level in value.split("/"):
        check_topic_segment(level)
    return value


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TableConfig(_Section):
    id: str = "T1"
    name: str | None = None

    _segment = field_validator("id")(check_topic_segment)


class WheelConfig(_Section):
    driver: Literal["wrp", "cammegh-ss2"] = "wrp"
    port: str = "/dev/ttyUSB0"
    baudrate: int | None = Field(default=None, ge=50, le=4_000_000)
    #: None: take the count from the wheel's own hello (37 until it says).
    pockets: Literal[37, 38] | None = None


class MqttConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=1883, ge=1, le=65535)
    base_topic: str | None = None

    @field_validator("base_topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        return None if value is None else check_topic(value)


class StateConfig(_Section):
    dir: Path = Path("/var/lib/wheeld")


class Config(_Section):
    table: TableConfig = TableConfig()
    wheel: WheelConfig = WheelConfig()
    mqtt: MqttConfig = MqttConfig()
    state: StateConfig = StateConfig()
    rules: RulesConfig = RulesConfig()

    @property
    def base_topic(self) -> str:
        """``mqtt.base_topic``, or ``wheeld/<table.id>``."""
        return self.mqtt.base_topic or f"wheeld/{self.table.id}"


def describe(error: ValidationError) -> list[str]:
    """One line per problem, each naming its dotted key."""
    problems = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        if item["type"] == "extra_forbidden":
            problems.append(f"{key}: unknown key")
        else:
            problems.append(f"{key}: {item['msg']}")
    return problems


def from_mapping(data: dict[str, Any], source: str) -> Config:
    """Validate an already-parsed configuration; raises ConfigError."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, describe(exc)) from None


def load(path: Path) -> Config:
    """Read and validate a configuration file; raises ConfigError."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), ["not UTF-8 text"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    return from_mapping(data, str(path))
