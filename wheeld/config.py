"""The configuration file (TOML) read into pydantic models.

Unknown keys are errors, never silent defaults; every problem is reported with
the dotted key it belongs to, all at once, blamed on the file or on the
environment variable that set it. Numbers and booleans are strict: a TOML
boolean is not a number (``settle_ms = true`` is refused, not read as 1 ms).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import ssl
import stat
import tomllib
import unicodedata
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from wheeld.config_words import did_you_mean, explain, section_model
from wheeld.core.rules import RulesConfig
from wheeld.table.alerts import AlertSettings

#: A configuration is a few kilobytes; anything bigger is the wrong file.
MAX_CONFIG_BYTES = 1 << 20
#: No key nests deeper than a few levels: a file or an environment override that nests
#: tables or arrays deeper than this (the file's top level is 0) is the wrong one, refused
#: in one line before pydantic and the error's wording walk it. A dotted key or header of
#: more parts is refused before tomllib reads the file (its time and memory grow with the
#: square of a key's parts: 20,000 of them took 9 s and 1.6 GB); tomllib running out of
#: Python's recursion on a deep value (some 330 levels) is caught.
MAX_NESTING = 16
#: MQTT's length limit for its strings and binary data (user name, password).
MQTT_MAX_BYTES = 65_535
#: Longest base topic and reply prefix: room under MQTT's limit for the levels
#: wheeld adds, and short enough for a broker's ACL.
MAX_TOPIC_CHARS = 200
MAX_TABLE_ID_CHARS = 64
#: The longest ``table.name``: one line for patrons. The board cuts a name wider than
#: its title bar with an ellipsis, checked with 62 characters (tests/test_marquee_strip.py).
MAX_TABLE_NAME_CHARS = 64
#: The longest ``table.currency``: a code (`EUR`) or a symbol (`US$`), beside the limits.
MAX_CURRENCY_CHARS = 8


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong, and where it came from: the file or an environment variable."""

    source: str
    #: ``<dotted key>: what is wrong``.
    text: str

    def __str__(self) -> str:
        return f"{self.source}: {self.text}"


class ConfigError(Exception):
    """A configuration that cannot be used; ``problems`` holds one line per key."""

    def __init__(self, source: str, problems: list[str] | list[Problem]) -> None:
        self.source = source
        self.reports = [p if isinstance(p, Problem) else Problem(source, p) for p in problems]
        super().__init__("; ".join(str(report) for report in self.reports))

    @property
    def problems(self) -> list[str]:
        """What is wrong, key by key, without saying where it came from."""
        return [report.text for report in self.reports]


def read_regular_file(path: Path, limit: int) -> bytes:
    """A regular file's bytes, at most ``limit`` of them.

    Raises OSError, or ValueError with a short reason for a device, a pipe or
    a directory (``/dev/zero`` would be read forever) or a file over the limit.
    """
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError("not a regular file")
    # O_NONBLOCK: should the path become a pipe after the check, open does not hang.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"over {limit:,} bytes")
    return data


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def check_topic_segment(value: str) -> str:
    """MQTT topic levels may not hold wildcards, separators or controls, or be empty."""
    if not value or any(char in value for char in "+#/") or _CONTROL.search(value):
        raise ValueError(
            "must be a non-empty MQTT topic level without '+', '#', '/' or control characters"
        )
    return value


def check_topic(value: str) -> str:
    """A topic for publishing: levels without wildcards, none empty, not a broker topic."""
    if value.startswith("$"):
        raise ValueError("must not start with '$' (topics of the broker itself, like $SYS)")
    for level in value.split("/"):
        if not level or any(char in level for char in "+#") or _CONTROL.search(level):
            raise ValueError(
                "must be MQTT topic levels joined by '/', none empty, without '+', '#' "
                "or control characters"
            )
    return value


def check_text(value: str | None) -> str | None:
    """Free text people read (a name on the board): printable, one line, not blank."""
    if value is None:
        return None
    if _CONTROL.search(value):
        raise ValueError("must be one line of printable text (no control characters)")
    if not value.strip() or value != value.strip():
        raise ValueError("must not be blank or start or end with spaces")
    return value


def check_mqtt_string(value: str | None) -> str | None:
    """MQTT carries its strings with a 16-bit length."""
    if value is not None and len(value.encode("utf-8", "surrogatepass")) > MQTT_MAX_BYTES:
        raise ValueError(f"over {MQTT_MAX_BYTES:,} bytes (MQTT's limit)")
    return value


_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def check_host(value: str) -> str:
    """A host name (RFC 1123, and '_' as resolvers take it) or an IP address."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        pass
    else:
        return value
    name = value.removesuffix(".")
    labels = name.split(".")
    # An all-digit last label is a mistyped IPv4 address, never a name.
    if (
        not name
        or len(name) > 253
        or not all(_HOST_LABEL.fullmatch(label) for label in labels)
        or labels[-1].isdigit()
    ):
        raise ValueError(
            "must be a host name or an IP address "
            "(no scheme, no brackets, no port: the port is mqtt.port)"
        )
    return value


#: The pyserial URL schemes ``wheel.port`` may use: those that reach a real wheel
#: and give the event loop a file descriptor to watch (pyserial-asyncio-fast
#: reads nothing else). ``hwgrep://`` finds a device by its USB ids.
PORT_URL_SCHEMES = ("socket", "hwgrep")
#: Why the other schemes pyserial knows are refused.
_REFUSED_SCHEMES = {
    "loop": "pyserial's loopback, not a wheel",
    "rfc2217": "pyserial's RFC 2217 client has no file descriptor for the event loop to "
    "watch; serve the port as raw TCP (ser2net) and use socket://HOST:PORT",
    "spy": "a debugging wrapper; give the device path and record with wheeld run --capture",
    "alt": "give the device path itself",
    "cp2110": "a HID bridge with no file descriptor for the event loop to watch",
}


def check_port(value: str) -> str:
    """A device path, or a pyserial URL of a scheme that can reach a wheel (see above)."""
    scheme, url, rest = value.partition("://")
    if not url:
        return value
    # pyserial reads the scheme without regard to case.
    scheme = scheme.lower()
    if scheme not in PORT_URL_SCHEMES:
        why = _REFUSED_SCHEMES.get(scheme, "not a pyserial URL wheeld can read a wheel from")
        raise ValueError(
            f"{scheme}:// is not allowed ({why}): use a device path, "
            f"socket://HOST:PORT or hwgrep://PATTERN"
        )
    if scheme == "socket":
        parts = urllib.parse.urlsplit(value)
        try:
            port = parts.port
        except ValueError:
            port = None
        if not parts.hostname or not port:
            raise ValueError("socket:// must name a host and a port 1-65535: socket://HOST:PORT")
    elif not rest:
        raise ValueError("hwgrep:// must have a pattern: hwgrep://PATTERN")
    else:
        hwgrep_pattern(value)
    return value


def hwgrep_pattern(value: str) -> str:
    """The regular expression of ``hwgrep://PATTERN[&n=N][&skip_busy]``, read as pyserial
    reads it (found by an attack: check-config said ok to a pattern run then refused,
    "Invalid IPv6 URL" or a regular expression that does not compile)."""
    if not value.startswith("hwgrep://"):  # pyserial's port setter asks for it so
        raise ValueError("write hwgrep:// in lower case, as pyserial reads it")
    try:
        urllib.parse.urlsplit(value)  # pyserial's URL handling splits it first
    except ValueError as exc:
        raise ValueError(f"hwgrep://: not a URL pyserial reads ({exc})") from None
    pattern, *options = value.partition("://")[2].split("&")
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError) as exc:  # x{99999999999}, ((((...))))
        why = str(exc) if isinstance(exc, re.error | OverflowError) else "nested too deeply"
        shown = repr(pattern[:40])
        raise ValueError(f"hwgrep://: {shown} is not a regular expression ({why})") from None
    for option in options:
        name, _, number = option.partition("=")
        if option != "skip_busy" and not (
            name == "n" and number.isascii() and number.isdigit() and int(number) >= 2
        ):
            raise ValueError(f"hwgrep://: {option!r} is no option (n=N from 2, or skip_busy)")
    return pattern


class _Section(BaseModel):
    # Strict: a TOML integer for an int, a TOML boolean for a bool (floats take
    # integers too); paths are the one thing read from strings, marked per field.
    # Built when first used (``defer_build``): ``Config`` when a file is validated, the
    # archive's sections only by ``wheeld archive``. (The sections ``Config`` gives as
    # defaults are built at import all the same: making the default builds the model.)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, defer_build=True)


def _path(default: Path | None = None, description: str | None = None) -> Any:
    return Field(default=default, strict=False, description=description)


class TableConfig(_Section):
    """``[table]``: which table this is."""

    id: str = Field(
        default="T1",
        max_length=MAX_TABLE_ID_CHARS,
        description="The table's id. Every message carries it, and it is the default MQTT "
        "topic level (`wheeld/<table.id>`) and client id (`wheeld-<table.id>`): no `+`, `#`, "
        "`/`, spaces, control or invisible characters (a bidi override), not starting with "
        "`$` (a topic level); under "
        "`wheeld@T1` the unit sets it to the instance.",
    )
    name: str | None = Field(
        default=None,
        max_length=MAX_TABLE_NAME_CHARS,
        description="The table's name for patrons (`Ruleta 1`): the marquee shows it large, "
        "and the id small in a corner, for staff. Unset: the marquee shows the id. At most "
        "64 characters, one line without control characters, not blank; the board cuts a "
        "name wider than its title bar with an ellipsis.",
    )
    #: Table limits, shown on the marquee.
    min_bet: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="The table's minimum bet, shown on the marquee.",
    )
    max_bet: float | None = Field(
        default=None,
        ge=0,
        allow_inf_nan=False,
        description="The table's maximum bet, shown on the marquee; not below `min_bet`.",
    )
    currency: str = Field(
        default="",
        max_length=MAX_CURRENCY_CHARS,
        description="The currency the bets are in, shown beside them (`EUR`, `US$`): at "
        "most 8 characters, no spaces or control characters.",
    )

    _text = field_validator("name")(check_text)

    @field_validator("currency")
    @classmethod
    def _currency(cls, value: str) -> str:
        if _CONTROL.search(value) or any(char.isspace() for char in value):
            raise ValueError("must be a code or a symbol (EUR, US$), without spaces")
        return value

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        # The id is a topic level and the default base topic starts with it.
        if value.startswith("$"):
            raise ValueError("must not start with '$'")
        # Staff read it and type it (a command's reply, the marquee's corner, the logs):
        # no spaces, nor characters that do not show or turn the text around.
        if any(char.isspace() or unicodedata.category(char) == "Cf" for char in value):
            raise ValueError("must not hold spaces or invisible characters (a bidi override)")
        return check_topic_segment(value)

    @model_validator(mode="after")
    def _limits(self) -> TableConfig:
        low, high = self.min_bet, self.max_bet
        if low is not None and high is not None and low > high:
            raise ValueError(f"max_bet {high:g} is below min_bet {low:g}")
        return self


class WheelConfig(BaseModel):
    """``[wheel]``: the wheel, its protocol and its serial link."""

    # Extra keys are the driver's own section (``[wheel.<Driver.section>]``),
    # checked against the driver's model in _driver_problems.
    model_config = ConfigDict(extra="allow", frozen=True, strict=True, defer_build=True)

    driver: str = Field(
        default="wrp",
        description="The wheel's protocol: an installed driver (`wheeld.drivers` entry "
        "points). `wrp` ships with wheeld; `cammegh-ss2` and `cammegh-mercury` come with "
        "`wheeld-cammegh`. "
        "`check-config` names the installed ones when this is not one of them.",
    )
    port: str = Field(
        default="/dev/ttyUSB0",
        min_length=1,
        description="The wheel's serial port. A device path, a pty, `socket://HOST:PORT` "
        "(a wheel behind a raw TCP serial server, or `wheeld simulate --target tcp`) or "
        "`hwgrep://PATTERN` (the first serial device whose USB ids or description match; "
        "pyserial's options `&n=N` and `&skip_busy`; a pattern that is no regular expression "
        "is refused, and one no device matches at start unless `wait_for_device`). "
        "Other pyserial URLs are refused: `loop://` is a loopback, not a wheel; "
        "`rfc2217://` and `cp2110://` give the event loop no file descriptor to watch, so "
        "nothing would ever be read (serve the port as raw TCP, as ser2net does, and use "
        "`socket://`); `spy://` and `alt://` wrap a device path that can be given as it is. "
        "A device path must be there at start (unless `wait_for_device`), a character "
        "device this user may read and write.",
    )
    baudrate: int | None = Field(
        default=None,
        ge=50,
        le=4_000_000,
        description="The line speed. Unset: the driver's own (`wrp` 115200, `cammegh-ss2` 9600).",
        json_schema_extra={"shown_default": "the driver's"},
    )
    pockets: Literal[37, 38, 39, 40] | None = Field(
        default=None,
        description="37 single zero, 38 double zero, 39 triple zero (`000`), 40 with "
        "`0000` too (Cammegh SS2 firmware 2.52). Unset: the wheel's hello says (37 "
        "until it does).",
        json_schema_extra={"shown_default": "from the wheel"},
    )
    pocket_order: list[str] | None = Field(
        default=None,
        description="A custom pocket order (a Cammegh wheel set up with `*Z`): every pocket "
        "of a 37- to 40-pocket wheel once, clockwise from any of them, as the results name "
        'them (`"0"`, `"00"`, `"17"`). The layout, the statistics\' neighbours and arcs and the '
        "racetrack sectors follow it. Unset: the maker's standard order.",
        json_schema_extra={"shown_default": "the standard order"},
    )
    wait_for_device: bool = Field(
        default=False,
        description="At start-up, wait for a missing port instead of exiting with an error. "
        "A port that goes away *later* is always retried, 0.2 s after the first failure and "
        "twice as long after each next one, up to 5 s; a port lost within a second of "
        "opening counts as a failure, so one that accepts and hangs up at once is not "
        "reopened in a tight loop.",
    )
    usb_reset: bool = Field(
        default=False,
        description="Reset the USB serial adapter behind `port` when it wedges. After the "
        "port is closed for silence, or fails to open 3 times in a row; once until data "
        "flows again, at most once a minute. A device path only (never a pty or a URL); "
        "under systemd it needs the additions in docs/operations.md.",
    )

    _port = field_validator("port")(check_port)

    @field_validator("pocket_order")
    @classmethod
    def _a_wheel(cls, value: list[str] | None) -> list[str] | None:
        from wheeld.core.layout import pocket_order_problem

        problem = None if value is None else pocket_order_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _order_fits(self) -> WheelConfig:
        if self.pocket_order is not None and self.pockets not in (None, len(self.pocket_order)):
            raise ValueError(
                f"wheel.pocket_order has {len(self.pocket_order)} pockets, "
                f"wheel.pockets says {self.pockets}"
            )
        return self

    @property
    def order(self) -> tuple[str, ...] | None:
        """The custom pocket order, if one is set (``pocket_order``)."""
        return None if self.pocket_order is None else tuple(self.pocket_order)

    @field_validator("driver")
    @classmethod
    def _installed(cls, value: str) -> str:
        from wheeld.drivers import UnknownDriver, driver_named

        try:
            driver_named(value)
        except UnknownDriver as exc:
            raise ValueError(str(exc)) from None
        return value


class TlsConfig(_Section):
    """``[mqtt.tls]``: setting any of its files turns TLS on."""

    ca_file: Path | None = _path(
        description="The CA bundle that signs the broker's certificate; setting it turns TLS "
        "on. A relative path is beside the configuration file. Loaded when the "
        "configuration is read, as the MQTT client will load it: a file holding no PEM "
        "certificate is one line naming this key, not a `run` that retries the broker for "
        "ever."
    )
    cert_file: Path | None = _path(
        description="The client certificate (PEM); setting it turns TLS on. A relative path "
        "is beside the configuration file. It must load with its key (`key_file`, else the "
        "key in this file itself) when the configuration is read."
    )
    key_file: Path | None = _path(
        description="The client certificate's private key, given with `cert_file` (alone "
        "it is refused). A secret: a relative path is "
        "looked up in `$CREDENTIALS_DIRECTORY` first, like `mqtt.password_file`; "
        "unencrypted (the client has no passphrase to give: an encrypted key is refused)."
    )
    insecure: bool = Field(
        default=False, description="Skip the broker host name check. For testing only."
    )


def split_server(value: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:1883`` for an IPv6 address) as host and port; ValueError."""
    if "://" in value:
        raise ValueError(f"{value!r}: no scheme, just HOST:PORT (TLS is mqtt.tls)")
    if value.startswith("["):
        host, bracket, rest = value[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ValueError(f"{value!r}: an IPv6 address is written [ADDRESS]:PORT")
        port = rest[1:]
        try:
            if ipaddress.ip_address(host).version != 6:
                raise ValueError
        except ValueError:
            raise ValueError(f"{value!r}: only an IPv6 address goes in brackets") from None
    else:
        host, colon, port = value.rpartition(":")
        if not colon or ":" in host:
            raise ValueError(f"{value!r}: must be HOST:PORT ([ADDRESS]:PORT for IPv6)")
        try:
            check_host(host)
        except ValueError:
            raise ValueError(f"{value!r}: {host!r} is not a host name or an IP address") from None
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{value!r}: the port must be 1-65535")
    return host, int(port)


def join_server(host: str, port: int) -> str:
    """``host:port``, the IPv6 address in brackets: how ``mqtt.servers`` writes a broker."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class MqttConfig(_Section):
    """``[mqtt]``: the broker, and the topics the table publishes under."""

    host: str = Field(
        default="127.0.0.1",
        description="The broker's host name or IP address. No scheme, brackets or port (the "
        "port is `mqtt.port`); `check-config` says when it does not resolve.",
    )
    port: int = Field(default=1883, ge=1, le=65535, description="The broker's port.")
    servers: list[str] | None = Field(
        default=None,
        description="Several brokers, tried in order, instead of `host` and `port`. Giving "
        'both is an error; `["broker-a:1883", "10.0.0.7:1883", "[fd00::7]:1883"]`, each '
        "`HOST:PORT` with the host checked as `mqtt.host` and an IPv6 address in brackets; "
        "not empty, none twice. The daemon, `wheeld marquee` and `wheeld display` connect "
        "to the first that answers, move to the next when it goes, and always start again "
        'from the first (docs/mqtt.md, "Several brokers"). TLS, user name and password are '
        "the same for all.",
    )
    base_topic: str | None = Field(
        default=None,
        max_length=MAX_TOPIC_CHARS,
        description="The topic prefix every message goes under (`<base>`). Leave it out: "
        "it follows `table.id`, so one file serves every table; one that does not name "
        "`table.id` is a warning (another table's topics?). At most 200 characters (room "
        "under MQTT's limits for the levels wheeld adds, and short enough for a broker's "
        "ACL), no wildcards, no empty levels, not starting with `$` (the broker's own `$SYS` "
        "topics).",
        json_schema_extra={"shown_default": '"wheeld/<table.id>"'},
    )
    reply_prefix: str = Field(
        default="",
        max_length=MAX_TOPIC_CHARS,
        description="Where replies to operator commands may go (the MQTT 5 response topic or "
        "the payload's `reply_to`). Empty (the default): any topic the sender names, as MQTT "
        "5 has it, but never `<base>` or under it, a `$` topic, a filter or a topic with an "
        "empty level; the broker's ACL says where wheeld may write. Set (e.g. "
        '`"wheeld-replies/"`, as the shipped ACL example does), replies go only under it: '
        "it ends with `/`, has no wildcards or empty levels, does not start with `$`, and is "
        "neither `<base>`, under it, nor above it (the ACL lets command senders read the "
        "replies, and must not let them read or write the table's own topics through it).",
    )
    client_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="The MQTT client id: stable, so the broker keeps the session. At most "
        "128 characters, no spaces or control characters (it is named in the log and in "
        "the systemd STATUS line).",
        json_schema_extra={"shown_default": '"wheeld-<table.id>"'},
    )
    protocol: Literal["5", "3.1.1"] = Field(
        default="5", description='The MQTT version, a string: `"5"` or `"3.1.1"`.'
    )
    keepalive_s: int = Field(
        default=30,
        ge=5,
        le=3600,
        description="The keepalive, in seconds. The broker publishes the last will after "
        "1.5 times this without traffic (and only then may a replacement daemon start: "
        'docs/mqtt.md, "One table, one daemon").',
    )
    session_expiry_s: int = Field(
        default=86_400,
        ge=0,
        le=4_294_967_295,
        description="How long the broker keeps the session while wheeld is away (MQTT 5), "
        "in seconds. The most MQTT can say is 4,294,967,295 (never expires).",
    )
    username: str | None = Field(
        default=None, description="The user name. At most 65,535 bytes (MQTT's limit)."
    )
    password: str | None = Field(
        default=None,
        repr=False,
        description="The password; prefer `password_file`. At most 65,535 bytes.",
    )
    password_file: Path | None = _path(
        description="A regular file holding the password (surrounding whitespace dropped; "
        "at most 65,535 bytes, MQTT's limit). A relative path is looked up in "
        "`$CREDENTIALS_DIRECTORY` (systemd `LoadCredential=`) first, then beside the "
        "configuration file."
    )
    tls: TlsConfig = TlsConfig()
    history_length: int = Field(
        default=100,
        ge=1,
        le=1000,
        description="How many winning numbers `<base>/history` carries.",
    )

    _host = field_validator("host")(check_host)

    @field_validator("servers")
    @classmethod
    def _servers(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError('must name at least one broker ("host:port"), or be left out')
        seen: dict[tuple[str, int], int] = {}
        for number, server in enumerate(value, 1):
            try:
                host, port = split_server(server)
            except ValueError as exc:
                raise ValueError(f"entry {number}: {exc}") from None
            # A broker twice is a typo for another one: the failover would have one less.
            first = seen.setdefault((host.lower().rstrip("."), port), number)
            if first != number:
                raise ValueError(f"entry {number}: {server!r} is entry {first} again")
        return value

    @property
    def brokers(self) -> list[str]:
        """Every broker to try, in order, as ``host:port``: ``servers``, else host and port."""
        return list(self.servers) if self.servers else [join_server(self.host, self.port)]

    _strings = field_validator("username", "password")(check_mqtt_string)

    @field_validator("client_id")
    @classmethod
    def _client_id(cls, value: str | None) -> str | None:
        if value is not None and (_CONTROL.search(value) or any(c.isspace() for c in value)):
            raise ValueError("must have no spaces or control characters")
        return value

    @field_validator("base_topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        return None if value is None else check_topic(value)

    @field_validator("reply_prefix")
    @classmethod
    def _reply_prefix(cls, value: str) -> str:
        if not value:
            return value  # any topic the other checks allow
        if not value.endswith("/"):
            raise ValueError("must end with '/' (replies go to topics under it)")
        check_topic(value[:-1])
        return value


#: Where a state directory can never be: the kernel's file systems, not storage.
SYSTEM_TREES = (Path("/dev"), Path("/proc"), Path("/sys"))


def check_state_dir(value: Path) -> Path:
    """An absolute path, outside /dev, /proc and /sys, that is or can become a directory.

    ``dir = ""`` reads as ``.``: the journal would follow whatever directory the
    daemon happens to start in.
    """
    if not value.is_absolute():
        raise ValueError("must be an absolute path (the journal's directory)")
    # Both as written and with symlinks followed: /var/lib/wheeld -> /proc/... too.
    seen = [Path(os.path.normpath(value))]
    # A symlink loop (RuntimeError) is refused by the stat below.
    with contextlib.suppress(OSError, RuntimeError):
        seen.append(value.resolve())
    for path in seen:
        if path == Path("/"):  # the journal, its lock and its copies at the top of the system
            raise ValueError("must not be the root directory (give the table a directory)")
        for tree in SYSTEM_TREES:
            if path.is_relative_to(tree):
                raise ValueError(f"must not be under {tree} (no journal can live there)")
    # The nearest part that exists must be a directory: "/etc/passwd/x" can never be made.
    for path in (value, *value.parents):
        try:
            mode = path.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            raise ValueError(f"{path}: {exc.strerror or exc}") from None
        if not stat.S_ISDIR(mode):
            raise ValueError(f"{path} exists and is not a directory")
        break
    return value


class StateConfig(_Section):
    """``[state]``: the journal, and how long it keeps what."""

    dir: Path = _path(
        Path("/var/lib/wheeld"),
        description="The journal's directory (`journal.sqlite3`, `game-ids`, `lock`). An "
        "absolute path (not empty, never relative to wherever the daemon starts), not the "
        "root directory, not under `/dev`, `/proc` or `/sys` (also through a symlink), and a "
        "directory or a path one "
        "can be made at, by this user; a journal there must be this table's. Under "
        "`wheeld@T1` the unit sets it to `/var/lib/wheeld/T1`.",
    )
    decisions_days: int = Field(
        default=400,
        ge=365,
        le=36_500,
        description="Days the journal keeps game decisions, operator commands and alarms. "
        "At least a year, for the year's audit and any dispute raised within it; applied "
        "at start and hourly, a small batch at a time, an anchor keeping what is left "
        'verifiable (docs/operations.md, "Retention").',
    )
    frames_days: int = Field(
        default=90,
        ge=1,
        le=36_500,
        description="Days it keeps the serial lines behind the games. They are the "
        "evidence of a disputed game, and disputes are raised within days.",
    )
    keep_games: int | None = Field(
        default=None,
        ge=10,
        le=10_000_000,
        description="Besides: nothing of a game older than the last N games. Unset: no such bound.",
    )

    @field_validator("dir", mode="before")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        # Before it becomes a Path: Path("") is ".", the current directory.
        if value == "":
            raise ValueError("must not be empty: an absolute path (the journal's directory)")
        return value

    _dir = field_validator("dir")(check_state_dir)


class SigningConfig(_Section):
    """``[signing]``: the Ed25519 key every ``<base>/game`` message and alarm is signed with."""

    key_file: Path | None = _path(
        description="The table's Ed25519 private key, which signs every `<base>/game` "
        "message and alarm. PKCS#8 PEM, as `wheeld keygen --out DIR` writes it "
        "(`signing.key`, never its public half `signing.pub`); a secret, looked up like "
        "`mqtt.password_file` (`$CREDENTIALS_DIRECTORY` first: the units pass it as the "
        "credential `signing.key`). Never logged, never published, never on a command "
        "line. `run` and `check-config` load it: a missing, unreadable or malformed key is "
        "one line naming this key. `wheeld replay` signs with it too."
    )
    required: bool = Field(
        default=True,
        description="Refuse to run without `key_file`. `false` runs unsigned (one warning "
        "in the log): consumers that verify will then refuse every message.",
    )


class MarqueeConfig(_Section):
    """``[marquee]``: the winning-number display board (``wheeld marquee``)."""

    listen: str = Field(
        default="127.0.0.1:8080",
        description="Where `wheeld marquee` serves the board: `HOST:PORT` (`[v6]:PORT`). "
        "`--listen` overrides it.",
    )
    language: Literal["es", "en"] = Field(
        default="es",
        description="The board's words: `es` (Spanish, the default: HAGAN JUEGO, NO VA MÁS, "
        "MESA CERRADA) or `en` (English: PLACE YOUR BETS, NO MORE BETS, TABLE CLOSED).",
    )
    stats_games: int = Field(
        default=100,
        ge=1,
        le=1000,
        description="Games the hot and cold numbers and the percentages are taken over.",
    )
    stats_min_games: int = Field(
        default=37,
        ge=1,
        le=1000,
        description="Games in that window before hot and cold numbers are shown. With "
        'fewer, one or two draws make a number "hot"; 37 is one game a pocket; a value '
        "above `stats_games` means the whole window.",
    )
    history_shown: int = Field(
        default=18,
        ge=1,
        le=100,
        description="How many of the last numbers the board's strip holds. As many as fit "
        "are shown.",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        split_listen(value)  # HOST:PORT or [v6]:PORT, the host checked as mqtt.host is
        return value


def split_listen(value: str, *, any_port: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for an IPv6 address) as host and port; ValueError if not.

    ``any_port``: port 0 (any free one) is allowed, as a command-line flag may ask.
    """
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    lowest = 0 if any_port else 1
    if not sep or not port.isdigit() or not lowest <= int(port) < 65536:
        raise ValueError("must be HOST:PORT, the port 1-65535 (e.g. 127.0.0.1:9105)")
    try:
        check_host(host)
    except ValueError:
        raise ValueError(
            f"{host!r} is not a host name or an IP address (HOST:PORT, e.g. 127.0.0.1:9105)"
        ) from None
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (an endpoint nobody else can reach)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class MetricsConfig(_Section):
    """``[metrics]``: the OpenMetrics endpoint and the ``<base>/health`` heartbeat."""

    listen: str = Field(
        default="",
        description="`HOST:PORT` (`[v6]:PORT`) to serve OpenMetrics on, at `/metrics` "
        '(docs/metrics.md). `""` serves none, and `prometheus_client` is never imported. '
        "The host is checked like `mqtt.host`; a non-loopback address is allowed, with a "
        "warning at start; a port in use is one line naming this key, from `check-config` "
        "and from `run`.",
    )
    health_interval_s: float = Field(
        default=30.0,
        ge=5,
        le=3600,
        description="`<base>/health` is published on every change and at least this often, "
        "in seconds, as a heartbeat.",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        if value:
            split_listen(value)
        return value


class LogConfig(_Section):
    """``[log]``: what the daemon writes on stderr."""

    level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="The least severe lines written."
    )
    format: Literal["auto", "json", "console"] = Field(
        default="auto",
        description="`auto`: readable lines on a terminal, JSON lines otherwise (journald).",
    )


#: ``[alerts]``: assembled from the alerts' own keys (``wheeld.table.alerts``), one
#: module each, and as strict as every other section.
AlertsConfig = AlertSettings


class Config(_Section):
    table: TableConfig = TableConfig()
    wheel: WheelConfig = WheelConfig()
    mqtt: MqttConfig = MqttConfig()
    state: StateConfig = StateConfig()
    log: LogConfig = LogConfig()
    marquee: MarqueeConfig = MarqueeConfig()
    signing: SigningConfig = SigningConfig()
    rules: RulesConfig = RulesConfig()
    alerts: AlertsConfig = AlertsConfig()
    metrics: MetricsConfig = MetricsConfig()

    @property
    def base_topic(self) -> str:
        """``mqtt.base_topic``, or ``wheeld/<table.id>``."""
        return self.mqtt.base_topic or f"wheeld/{self.table.id}"

    @property
    def client_id(self) -> str:
        """``mqtt.client_id``, or ``wheeld-<table.id>``."""
        return self.mqtt.client_id or f"wheeld-{self.table.id}"


#: Where the archive raises its own alarms, unless ``archive.alarm_topic`` says.
ARCHIVE_ALARM_TOPIC = "wheeld-archive/alarm"
#: The kinds of message the archive follows under each table's base topic.
ARCHIVE_KINDS = ("game", "alarm", "info", "stats")


def check_table_pattern(value: str) -> str:
    """A base-topic pattern: topic levels, ``+`` standing for one whole level, no ``#``."""
    if value.startswith("$"):
        raise ValueError("must not start with '$' (topics of the broker itself)")
    for level in value.split("/"):
        if not level or "#" in level or ("+" in level and level != "+") or _CONTROL.search(level):
            raise ValueError(
                "must be topic levels joined by '/', none empty, '+' only as a whole level "
                "and no '#' (a base topic pattern, e.g. wheeld/+)"
            )
    return value


class ArchiveConfig(_Section):
    """``[archive]``: the casino's archive (``wheeld archive``, docs/archive.md)."""

    #: libpq connection string or URI of the PostgreSQL database.
    dsn: str = Field(min_length=1, repr=False)
    #: The database password, from a file (a secret: $CREDENTIALS_DIRECTORY first).
    password_file: Path | None = _path()
    #: Base-topic patterns of the tables followed, ``+`` for one level: ["wheeld/+"].
    tables: list[str] = Field(min_length=1, max_length=1000)
    #: Each table's public keys (PEM files ``wheeld keygen`` wrote): table id -> files.
    trusted_keys: dict[str, list[Annotated[Path, Strict(False)]]] = Field(default_factory=dict)
    #: Pin a table's key from its first ``<base>/info`` when no file names one.
    trust_on_first_use: bool = False
    alarm_topic: str = Field(
        default=ARCHIVE_ALARM_TOPIC, max_length=MAX_TOPIC_CHARS, validate_default=True
    )
    #: Stable client id: the broker keeps the archive's session (and what it missed).
    client_id: str = Field(default="wheeld-archive", min_length=1, max_length=128)
    #: Messages the broker may send before the archive acknowledges any (MQTT 5).
    receive_maximum: int = Field(default=1000, ge=1, le=65_535)
    #: A commit takes at most this many messages, and waits at most this long for more.
    batch_max: int = Field(default=500, ge=1, le=100_000)
    batch_wait_ms: int = Field(default=20, ge=0, le=10_000)
    #: Games asked of a table in one recall (a reply carries their frames too).
    recall_games: int = Field(default=10, ge=1, le=100)
    #: A recall unanswered this long is asked again, at most ``recall_attempts`` times.
    recall_timeout_s: float = Field(default=30.0, gt=0, le=86_400)
    recall_attempts: int = Field(default=5, ge=1, le=1000)
    #: A gap is first asked of its table this long after it is found: a message late by
    #: a moment (another broker's path, a redelivery) fills it without a recall.
    recall_delay_s: float = Field(default=5.0, gt=0, le=3600)

    @field_validator("tables")
    @classmethod
    def _tables(cls, value: list[str]) -> list[str]:
        for number, pattern in enumerate(value, 1):
            try:
                check_table_pattern(pattern)
            except ValueError as exc:
                raise ValueError(f"entry {number} ({pattern!r}): {exc}") from None
        return value

    @field_validator("client_id")
    @classmethod
    def _client_id(cls, value: str) -> str:
        # It is a level of the reply topic (<reply_prefix><client_id>/recall): a '+' there
        # would follow every archive's replies, and no table could publish to it.
        return check_topic_segment(value)

    @field_validator("trusted_keys", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        # A table with one key may name its file alone: T1 = "keys/T1.pub".
        if isinstance(value, dict):
            return {k: [v] if isinstance(v, str) else v for k, v in value.items()}
        return value

    @field_validator("trusted_keys")
    @classmethod
    def _tables_named(cls, value: dict[str, list[Path]]) -> dict[str, list[Path]]:
        for table, files in value.items():
            check_topic_segment(table)
            if not files:
                raise ValueError(f"{table}: name at least one key file")
        return value

    @field_validator("alarm_topic")
    @classmethod
    def _alarm_topic(cls, value: str, info: ValidationInfo) -> str:
        check_topic(value)
        # Followed, its own alarms would come back as a table's, be flagged, alarmed, and
        # come back again, for ever.
        levels = value.split("/")
        for pattern in info.data.get("tables") or []:
            wanted = [*pattern.split("/"), "+"]
            if (
                len(wanted) == len(levels)
                and levels[-1] in ARCHIVE_KINDS
                and all(w in ("+", level) for w, level in zip(wanted, levels, strict=True))
            ):
                raise ValueError(
                    f"{value!r} is one of the topics the archive follows ({pattern}/"
                    f"{levels[-1]}): it would read its own alarms back"
                )
        return value


class ArchiveSettings(_Section):
    """The archive's configuration file: ``[archive]``, ``[mqtt]`` as for ``run``, ``[log]``."""

    archive: ArchiveConfig
    mqtt: MqttConfig = MqttConfig()
    log: LogConfig = LogConfig()


def _consistency(sections: Mapping[str, BaseModel]) -> list[tuple[str, str]]:
    """Problems between keys of different sections, as ``(dotted key, message)``: those
    of the sections that are valid on their own (a wrong section hides nothing else)."""
    problems = []
    table, mqtt = sections.get("table"), sections.get("mqtt")
    if isinstance(table, TableConfig) and isinstance(mqtt, MqttConfig):
        # Command senders are allowed to read the reply topics: were they the
        # table's own topics (or above them), the broker's ACL could not keep the
        # two apart, and a reply could land on <base>/result.
        base_topic = mqtt.base_topic or f"wheeld/{table.id}"
        base, prefix = base_topic + "/", mqtt.reply_prefix
        if prefix and (base.startswith(prefix) or prefix.startswith(base)):
            problems.append(
                (
                    "mqtt.reply_prefix",
                    f"must not be the base topic {base_topic!r}, under it or above it",
                )
            )
    if isinstance(mqtt, MqttConfig):
        both = {"host", "port"} & mqtt.model_fields_set
        if mqtt.servers is not None and both:
            problems.append(
                (
                    "mqtt.servers",
                    "give mqtt.servers or mqtt.host/mqtt.port, not both "
                    f"(mqtt.{sorted(both)[0]} is set too)",
                )
            )
    wheel, rules = sections.get("wheel"), sections.get("rules")
    if isinstance(wheel, WheelConfig):
        problems += _driver_problems(wheel, rules if isinstance(rules, RulesConfig) else None)
    return problems


#: Where a value came from, by its key's path: the environment variable that set it.
Origins = dict[tuple[str, ...], str]


def _blame(key: tuple[str, ...], origins: Origins, source: str) -> str:
    """The environment variable that set ``key`` or a section holding it, or a key under
    it (``WHEELD_A__B`` makes the section ``a``), else the file."""
    for length in range(len(key), 0, -1):
        variable = origins.get(key[:length])
        if variable is not None:
            return variable
    under = sorted(variable for path, variable in origins.items() if path[: len(key)] == key)
    return under[0] if under else source


def describe(
    error: ValidationError,
    source: str,
    origins: Origins | None = None,
    model: type[BaseModel] | None = None,
) -> list[Problem]:
    """One problem per error, each naming its dotted key, blamed where it was set, in
    plain words (``config_words.explain``): the value written and the form expected."""
    problems = []
    for item in error.errors():
        key = tuple(str(part) for part in item["loc"])
        if item["type"] == "cross_field":
            key += tuple(str(item.get("ctx", {})["key"]).split("."))
        name = ".".join(key) or "(top level)"
        text = explain(item, model or Config)
        problems.append(Problem(_blame(key, origins or {}, source), f"{name}: {text}"))
    return problems


ENV_PREFIX = "WHEELD_"


def apply_environment(
    data: dict[str, Any], environ: Mapping[str, str]
) -> tuple[list[Problem], Origins]:
    """Overlay ``WHEELD_<SECTION>__<KEY>[__<KEY>]`` variables.

    Returns the problems found and which variable set which key. Values are
    read as TOML values when they parse as one (numbers, booleans, quoted
    strings), else taken as plain strings: ``WHEELD_MQTT__PORT=1884``,
    ``WHEELD_MQTT__HOST=broker.local``.
    """
    problems = []
    origins: Origins = {}
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if not all(path):
            problems.append(Problem(name, "not of the form WHEELD_<SECTION>__<KEY>"))
            continue
        try:
            if _dotted_too_deep(raw):  # an inline table's keys, as in a file
                raise RecursionError
            value: Any = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        except RecursionError:
            value = None
        # The value sits as deep as its key's path, as it would in the file.
        if len(path) > MAX_NESTING or value is None or _too_deep(value, len(path)):
            problems.append(Problem(name, f"nested more than {MAX_NESTING} levels deep"))
            continue
        node = data
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                problems.append(Problem(name, f"{'.'.join(path[:-1])} is not a section"))
                break
            node = child
        else:
            node[path[-1]] = value
            origins[tuple(path)] = name
    return problems, origins


def find_secret(path: Path, environ: Mapping[str, str], base: Path) -> Path:
    """Where a secret file is: relative paths look in $CREDENTIALS_DIRECTORY first,
    then beside the configuration file."""
    candidates = [path]
    if not path.is_absolute():
        candidates = [base / path]
        if environ.get("CREDENTIALS_DIRECTORY"):
            candidates.insert(0, Path(environ["CREDENTIALS_DIRECTORY"]) / path)
    for candidate in candidates:
        try:
            mode = candidate.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:  # a directory it may not enter, a name too long, a loop
            raise ValueError(f"{candidate}: cannot look at it: {exc.strerror or exc}") from None
        if not stat.S_ISREG(mode):
            raise ValueError(f"{candidate}: not a regular file")
        return candidate
    raise FileNotFoundError(f"no such file: {' or '.join(str(c) for c in candidates)}")


def _read_password(path: Path, environ: Mapping[str, str], base: Path) -> str:
    """The password in the file, without surrounding whitespace; ValueError or OSError."""
    found = find_secret(path, environ, base)
    # Room for the line terminator an editor adds after the longest password.
    data = read_regular_file(found, MQTT_MAX_BYTES + 2)
    password = data.decode("utf-8").strip()
    check_mqtt_string(password)
    return password


def _resolve_files(
    sections: Mapping[str, BaseModel],
    environ: Mapping[str, str],
    base: Path,
    *,
    signing_key: bool,
) -> tuple[dict[str, BaseModel], list[str]]:
    """The valid sections whose secret and TLS files were found, read and checked, and
    the problems as ``dotted key: message``: the password file read, the TLS files
    loaded as the MQTT client will, the signing key's file found."""
    updates: dict[str, BaseModel] = {}
    problems: list[str] = []
    mqtt = sections.get("mqtt")
    if isinstance(mqtt, MqttConfig):
        resolved, problems = _resolve_mqtt_files(mqtt, environ, base)
        if resolved is not mqtt:
            updates["mqtt"] = resolved
    signing = sections.get("signing")
    if signing_key and isinstance(signing, SigningConfig) and signing.key_file is not None:
        try:
            key_path = find_secret(signing.key_file, environ, base)
        except FileNotFoundError as exc:
            problems.append(f"signing.key_file: {exc}{_credential_hint(signing.key_file, environ)}")
        except ValueError as exc:
            problems.append(f"signing.key_file: {exc}")
        else:
            updates["signing"] = signing.model_copy(update={"key_file": key_path})
    return updates, problems


#: The name the units pass the signing key under (``LoadCredential=signing.key:...``).
SIGNING_CREDENTIAL = "signing.key"


def _credential_hint(path: Path, environ: Mapping[str, str]) -> str:
    """Where a relative key not found would be under systemd, when that is the likely cause."""
    if path.is_absolute() or environ.get("CREDENTIALS_DIRECTORY"):
        return ""
    return (
        " (under systemd the unit passes it as a credential: run check-config with "
        "CREDENTIALS_DIRECTORY=/etc/wheeld/credentials/<table>, as docs/operations.md shows)"
    )


def _resolve_mqtt_files(
    mqtt: MqttConfig, environ: Mapping[str, str], base: Path
) -> tuple[MqttConfig, list[str]]:
    """``[mqtt]`` with its password file read and its TLS paths found and checked (the
    same object when there was nothing to do), and the problems, by dotted key."""
    problems = []
    updates: dict[str, Any] = {}
    if mqtt.password_file is not None:
        if mqtt.password is not None:
            problems.append("mqtt.password_file: give password or password_file, not both")
        else:
            try:
                updates["password"] = _read_password(mqtt.password_file, environ, base)
            except FileNotFoundError as exc:
                problems.append(f"mqtt.password_file: {exc}")
            except OSError as exc:
                problems.append(f"mqtt.password_file: cannot read: {exc.strerror or exc}")
            except UnicodeDecodeError:
                problems.append("mqtt.password_file: not UTF-8 text")
            except ValueError as exc:
                problems.append(f"mqtt.password_file: {exc}")
    if mqtt.tls.key_file is not None and mqtt.tls.cert_file is None:
        # Else TLS would be on with no client certificate, the key silently unused.
        problems.append(
            "mqtt.tls.key_file: set without mqtt.tls.cert_file, the client certificate "
            "the key belongs to"
        )
    tls_paths: dict[str, Path] = {}
    for key in ("ca_file", "cert_file", "key_file"):
        value = getattr(mqtt.tls, key)
        if value is None:
            continue
        # Only the key is a secret; certificates sit beside the configuration.
        search_env = environ if key == "key_file" else {}
        try:
            tls_paths[key] = find_secret(value, search_env, base)
        except (FileNotFoundError, ValueError) as exc:
            problems.append(f"mqtt.tls.{key}: {exc}")
    if not problems:
        problems += _tls_problems(tls_paths)
    if problems or (not updates and not tls_paths):
        return mqtt, problems
    updates["tls"] = mqtt.tls.model_copy(update=tls_paths)
    return mqtt.model_copy(update=updates), problems


class _KeyEncrypted(Exception):
    """The client key asked for a passphrase: the MQTT client has none to give."""


def _no_passphrase() -> bytes:
    raise _KeyEncrypted


def _tls_problems(paths: Mapping[str, Path]) -> list[str]:
    """Load the TLS files as the MQTT client will, so a wrong file fails here, not forever in run.

    The CA bundle must hold PEM certificates; the client certificate and key
    must load as a pair (the key in the certificate's file when no key_file).
    """
    problems = []
    ca_file = paths.get("ca_file")
    if ca_file is not None:
        try:
            ssl.create_default_context(cafile=ca_file)
        except ssl.SSLError as exc:
            problems.append(f"mqtt.tls.ca_file: {ca_file}: no PEM certificates ({exc.reason})")
        except OSError as exc:
            problems.append(f"mqtt.tls.ca_file: cannot read: {exc.strerror or exc}")
    cert_file = paths.get("cert_file")
    if cert_file is not None:
        key_file = paths.get("key_file")
        key = "mqtt.tls.key_file" if key_file is not None else "mqtt.tls.cert_file"
        try:
            ssl.create_default_context().load_cert_chain(cert_file, key_file, _no_passphrase)
        except _KeyEncrypted:
            problems.append(f"{key}: the private key is encrypted; give it without a passphrase")
        except ssl.SSLError as exc:
            problems.append(
                f"mqtt.tls.cert_file: {cert_file}"
                + (f" with {key_file}" if key_file is not None else "")
                + f": not a PEM certificate and its private key ({exc.reason or exc})"
            )
        except OSError as exc:
            problems.append(f"mqtt.tls.cert_file: cannot read: {exc.strerror or exc}")
    return problems


def driver_settings(config: Config) -> Any:
    """The driver's own section (``[wheel.<section>]``) as its model, or None."""
    from wheeld.drivers import driver_named

    driver = driver_named(config.wheel.driver)
    if driver.section is None or driver.settings is None:
        return None
    raw = (config.wheel.model_extra or {}).get(driver.section, {})
    return driver.settings.model_validate(raw)


def _driver_problems(wheel: WheelConfig, rules: RulesConfig | None) -> list[tuple[str, str]]:
    """Keys under ``[wheel]`` that belong to no field: the chosen driver's section or errors
    (its checks against ``[rules]`` only when those are valid)."""
    from wheeld.drivers import driver_named

    driver = driver_named(wheel.driver)
    problems: list[tuple[str, str]] = []
    known = [*WheelConfig.model_fields, *([driver.section] if driver.section else [])]
    for key, value in (wheel.model_extra or {}).items():
        if key != driver.section or driver.settings is None:
            unknown = f"unknown key (driver {driver.name!r})" + did_you_mean(key, known)
            problems.append((f"wheel.{key}", unknown))
            continue
        try:
            settings = driver.settings.model_validate(value)
        except ValidationError as exc:
            for item in exc.errors():
                where = ".".join(str(part) for part in ("wheel", key, *item["loc"]))
                problems.append((where, explain(item, driver.settings)))
            continue
        if driver.check is not None and rules is not None:
            problems += driver.check(settings, rules)
    return problems


def _sections(
    data: dict[str, Any], source: str, origins: Origins
) -> tuple[Config | None, dict[str, BaseModel], list[Problem]]:
    """The whole configuration (None when any of it is wrong), every section that is
    valid on its own, and every problem of the model."""
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        failed = {str(item["loc"][0]) for item in exc.errors() if item["loc"]}
        sections: dict[str, BaseModel] = {}
        for name, field in Config.model_fields.items():
            model = section_model(field.annotation)
            if name in failed or model is None:
                continue
            with contextlib.suppress(ValidationError):
                sections[name] = model.model_validate(data.get(name, {}))
        return None, sections, describe(exc, source, origins)
    return config, {name: getattr(config, name) for name in Config.model_fields}, []


def _too_deep(value: Any, depth: int = 0) -> bool:
    """Whether ``value``, at ``depth``, holds a table or an array deeper than
    ``MAX_NESTING``, found without recursion."""
    level = [value] if isinstance(value, dict | list) else []
    while level:
        if depth > MAX_NESTING:
            return True
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        depth += 1
    return False


#: TOML's strings (multi-line first) and comments: what holds no key's dots.
_STRINGS_AND_COMMENTS = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*'
)
#: What ends a key or a header's name: its neighbours in a line, a table or an array.
_KEY_ENDS = re.compile(r"[\n{}\[\],=]")


def _dotted_too_deep(text: str) -> bool:
    """Whether a key or table header, in a line or an inline table, has more than
    ``MAX_NESTING`` parts: looked at before tomllib, whose time and memory grow with the
    square of a key's parts. Strings and comments are set aside first (their dots are no
    key's); what is left between the marks that end a key holds one key at most."""
    code = _STRINGS_AND_COMMENTS.sub('""', text)
    return any(piece.count(".") >= MAX_NESTING for piece in _KEY_ENDS.split(code))


def _parse_file(path: Path) -> dict[str, Any]:
    deep = ConfigError(str(path), [f"not valid TOML: nested more than {MAX_NESTING} levels deep"])
    try:
        text = read_regular_file(path, MAX_CONFIG_BYTES).decode("utf-8")
        if text.startswith("\ufeff"):  # tomllib: "Invalid statement (at line 1, column 1)"
            raise ConfigError(
                str(path), ["starts with a byte-order mark: save it as UTF-8 without one"]
            )
        if _dotted_too_deep(text):
            raise deep
        data = tomllib.loads(text)
    except RecursionError:
        raise deep from None
    except OSError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), ["not UTF-8 text"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    except ValueError as exc:
        raise ConfigError(str(path), [f"cannot read: {exc}"]) from None
    if _too_deep(data):
        raise deep
    return data


def load(
    path: Path,
    environ: Mapping[str, str] | None = None,
    *,
    signing_key: bool = True,
    checks: Callable[[Mapping[str, BaseModel]], list[str]] | None = None,
) -> Config:
    """Read and validate a configuration file, with environment overrides and secrets.

    ``signing_key=False`` leaves ``signing.key_file`` unread: the board and the
    displays share the table's configuration but must never need its private key.
    ``checks`` judges the sections that are valid (their files found) further, each
    problem as ``dotted key: message``: ``wheeld.shell.readiness.load_for_run`` asks there
    what ``wheeld run`` needs of this machine.

    Raises ConfigError listing every problem, each naming its key and blamed on
    the file or on the environment variable that set it: every problem at once, a
    wrong section hiding nothing of the others.
    """
    env = os.environ if environ is None else environ
    source = str(path)
    data = _parse_file(path)
    env_problems, origins = apply_environment(data, env)
    config, sections, problems = _sections(data, source, origins)
    keyed = [f"{key}: {message}" for key, message in _consistency(sections)]
    updates, file_problems = _resolve_files(sections, env, path.parent, signing_key=signing_key)
    keyed += file_problems
    if checks is not None:
        keyed += checks({**sections, **updates})
    reports = (
        env_problems
        + problems
        + [
            Problem(_blame(tuple(text.partition(":")[0].split(".")), origins, source), text)
            for text in keyed
        ]
    )
    if reports or config is None:
        raise ConfigError(source, reports)
    if not updates:
        return config  # untouched: an empty file still reads as every value a default
    return config.model_copy(update=updates)


def load_archive(path: Path, environ: Mapping[str, str] | None = None) -> ArchiveSettings:
    """The archive's configuration (``[archive]``, ``[mqtt]``, ``[log]``), read as ``load``
    reads the daemon's: ``WHEELD_*`` overrides, secrets from $CREDENTIALS_DIRECTORY, every
    problem named by its key. The trusted key files must hold Ed25519 public keys."""
    env = os.environ if environ is None else environ
    source = str(path)
    data = _parse_file(path)
    env_problems, origins = apply_environment(data, env)
    try:
        settings = ArchiveSettings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            source, env_problems + describe(exc, source, origins, ArchiveSettings)
        ) from None
    if env_problems:
        raise ConfigError(source, env_problems)
    mqtt, problems = _resolve_mqtt_files(settings.mqtt, env, path.parent)
    archive = settings.archive
    updates: dict[str, Any] = {}
    if archive.password_file is not None:
        try:
            found = find_secret(archive.password_file, env, path.parent)
            updates["password_file"] = found
            read_regular_file(found, MQTT_MAX_BYTES).decode("utf-8")
        except (OSError, ValueError) as exc:
            why = getattr(exc, "strerror", None) or exc
            problems.append(f"archive.password_file: {why}")
    keys: dict[str, list[Path]] = {}
    for table, files in archive.trusted_keys.items():
        keys[table] = []
        for file in files:
            where = f"archive.trusted_keys.{table}"
            try:
                found = find_secret(file, {}, path.parent)
                _check_public_key(found)
            except (FileNotFoundError, ValueError) as exc:
                problems.append(f"{where}: {exc}")
                continue
            keys[table].append(found)
    updates["trusted_keys"] = keys
    if problems:
        raise ConfigError(
            source,
            [
                Problem(_blame(tuple(text.partition(":")[0].split(".")), origins, source), text)
                for text in problems
            ],
        )
    return settings.model_copy(update={"mqtt": mqtt, "archive": archive.model_copy(update=updates)})


def _check_public_key(path: Path) -> None:
    """ValueError unless ``path`` holds an Ed25519 public key (PEM)."""
    from wheeld.core.signing import SigningError, load_public_key

    try:
        load_public_key(path)
    except SigningError as exc:
        raise ValueError(str(exc)) from None
