"""The configuration file (TOML) read into pydantic models.

Unknown keys are errors, never silent defaults; every problem is reported with
the dotted key it belongs to, all at once.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
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
    #: Table limits, shown on the marquee.
    min_bet: float | None = Field(default=None, ge=0)
    max_bet: float | None = Field(default=None, ge=0)
    currency: str = ""

    _segment = field_validator("id")(check_topic_segment)


class ControlConfig(_Section):
    """``[wheel.control]``: drive a Cammegh SS2 instead of only listening to it."""

    enabled: bool = False
    #: The maker's value for a game server: 1159 = 1+2+4+128+1024.
    operating_mode: int = Field(default=1159, ge=0, le=65535)
    #: Send ``*u 1`` once bets have been open ``bets_open_s`` (manual-start mode).
    start_games: bool = True
    bets_open_s: float = Field(default=15.0, ge=0, le=3600)
    #: Ask for ``*bs`` ball passes (``*I 4``), so revolutions are counted.
    sensor_events: bool = True
    #: ``*X`` poll interval when the mode has no automatic status (>= 0.1 s).
    poll_s: float = Field(default=0.5, ge=0.1, le=60)


class WheelConfig(_Section):
    driver: Literal["wrp", "cammegh-ss2"] = "wrp"
    port: str = "/dev/ttyUSB0"
    baudrate: int | None = Field(default=None, ge=50, le=4_000_000)
    #: None: take the count from the wheel's own hello (37 until it says).
    pockets: Literal[37, 38] | None = None
    #: At start-up, wait for a missing port instead of exiting with an error.
    wait_for_device: bool = False
    control: ControlConfig = ControlConfig()


class TlsConfig(_Section):
    #: CA bundle that signs the broker's certificate; setting any key turns TLS on.
    ca_file: Path | None = None
    cert_file: Path | None = None
    #: Client key; a secret, so a relative path is looked up in $CREDENTIALS_DIRECTORY.
    key_file: Path | None = None
    insecure: bool = False


class MqttConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=1883, ge=1, le=65535)
    base_topic: str | None = None
    #: Stable client id, so the broker keeps the session; default "wheeld-<table.id>".
    client_id: str | None = Field(default=None, min_length=1, max_length=128)
    protocol: Literal["5", "3.1.1"] = "5"
    keepalive_s: int = Field(default=30, ge=5, le=3600)
    #: How long the broker keeps the session while wheeld is away (MQTT 5).
    session_expiry_s: int = Field(default=86_400, ge=0, le=4_294_967_295)
    username: str | None = None
    password: str | None = Field(default=None, repr=False)
    #: Read the password from this file; relative: $CREDENTIALS_DIRECTORY first.
    password_file: Path | None = None
    tls: TlsConfig = TlsConfig()
    #: How many winning numbers <base>/history carries.
    history_length: int = Field(default=100, ge=1, le=1000)

    @field_validator("base_topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        return None if value is None else check_topic(value)


class StateConfig(_Section):
    dir: Path = Path("/var/lib/wheeld")


class MarqueeConfig(_Section):
    """``[marquee]``: the winning-number display board (``wheeld marquee``)."""

    listen: str = "127.0.0.1:8080"
    language: Literal["es", "en"] = "es"
    #: Games the hot/cold numbers and percentages are taken over.
    stats_games: int = Field(default=100, ge=1, le=1000)
    #: How many of the last numbers the board lists.
    history_shown: int = Field(default=20, ge=1, le=100)

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError("must be HOST:PORT")
        return value


class LogConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    #: "auto": readable lines on a terminal, JSON lines otherwise (journald).
    format: Literal["auto", "json", "console"] = "auto"


class Config(_Section):
    table: TableConfig = TableConfig()
    wheel: WheelConfig = WheelConfig()
    mqtt: MqttConfig = MqttConfig()
    state: StateConfig = StateConfig()
    log: LogConfig = LogConfig()
    marquee: MarqueeConfig = MarqueeConfig()
    rules: RulesConfig = RulesConfig()

    @property
    def base_topic(self) -> str:
        """``mqtt.base_topic``, or ``wheeld/<table.id>``."""
        return self.mqtt.base_topic or f"wheeld/{self.table.id}"

    @property
    def client_id(self) -> str:
        """``mqtt.client_id``, or ``wheeld-<table.id>``."""
        return self.mqtt.client_id or f"wheeld-{self.table.id}"


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


ENV_PREFIX = "WHEELD_"


def apply_environment(data: dict[str, Any], environ: Mapping[str, str]) -> list[str]:
    """Overlay ``WHEELD_<SECTION>__<KEY>[__<KEY>]`` variables; returns problems found.

    Values are read as TOML values when they parse as one (numbers, booleans,
    quoted strings), else taken as plain strings: ``WHEELD_MQTT__PORT=1884``,
    ``WHEELD_MQTT__HOST=broker.local``.
    """
    problems = []
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if not all(path):
            problems.append(f"{name}: not of the form WHEELD_<SECTION>__<KEY>")
            continue
        try:
            value: Any = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                problems.append(f"{name}: {'.'.join(path[:-1])} is not a section")
                break
            node = child
        else:
            node[path[-1]] = value
    return problems


def find_secret(path: Path, environ: Mapping[str, str], base: Path) -> Path:
    """Where a secret file is: relative paths look in $CREDENTIALS_DIRECTORY first,
    then beside the configuration file."""
    candidates = [path]
    if not path.is_absolute():
        candidates = [base / path]
        if environ.get("CREDENTIALS_DIRECTORY"):
            candidates.insert(0, Path(environ["CREDENTIALS_DIRECTORY"]) / path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"no such file: {' or '.join(str(c) for c in candidates)}")


def _resolve_files(config: Config, environ: Mapping[str, str], base: Path) -> Config:
    """Read the password file, and make every TLS path absolute and checked."""
    mqtt = config.mqtt
    problems = []
    updates: dict[str, Any] = {}
    if mqtt.password_file is not None:
        if mqtt.password is not None:
            problems.append("mqtt.password_file: give password or password_file, not both")
        else:
            try:
                found = find_secret(mqtt.password_file, environ, base)
                updates["password"] = found.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                problems.append(f"mqtt.password_file: cannot read: {exc}")
    tls_paths: dict[str, Path] = {}
    for key in ("ca_file", "cert_file", "key_file"):
        value = getattr(mqtt.tls, key)
        if value is None:
            continue
        # Only the key is a secret; certificates sit beside the configuration.
        search_env = environ if key == "key_file" else {}
        try:
            tls_paths[key] = find_secret(value, search_env, base)
        except FileNotFoundError as exc:
            problems.append(f"mqtt.tls.{key}: {exc}")
    if problems:
        raise ConfigError("configuration", problems)
    updates["tls"] = mqtt.tls.model_copy(update=tls_paths)
    return config.model_copy(update={"mqtt": mqtt.model_copy(update=updates)})


def from_mapping(data: dict[str, Any], source: str) -> Config:
    """Validate an already-parsed configuration; raises ConfigError."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, describe(exc)) from None


def load(path: Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate a configuration file, with environment overrides and secrets.

    Raises ConfigError listing every problem, each naming its key.
    """
    env = os.environ if environ is None else environ
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), ["not UTF-8 text"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    problems = apply_environment(data, env)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(str(path), problems + describe(exc)) from None
    if problems:
        raise ConfigError(str(path), problems)
    try:
        return _resolve_files(config, env, path.parent)
    except ConfigError as exc:
        raise ConfigError(str(path), exc.problems) from None
