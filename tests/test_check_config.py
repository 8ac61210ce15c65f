"""check-config is run's own validation: whatever run refuses, check-config refused first.

Each way ``wheeld run`` can refuse a configuration is a case below: ``run`` is
started for real (a process, as systemd starts it), and its lines must be
check-config's, word for word, each behind ``wheeld run: ``. Both say every
problem at once, one line each.

Not a configuration, so not here: another wheeld holding the state directory
(check-config warns of it; run stops with exit 78 or the lock's line) and what
changes between the check and the start (a port unplugged, a disk filled): the
daemon's own one-line refusals remain for those.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wheeld.cli import main as wheeld
from wheeld.core.signing import Signer
from wheeld.drivers import drivers
from wheeld.shell.journal import JOURNAL_FILE, Journal
from wheeld.testing.rig import PtyWheel

KEYS = Path(__file__).parent / "keys"

#: The drivers installed here, as a refusal names them.
INSTALLED = ", ".join(sorted(drivers()))


@pytest.fixture
def wheel(tmp_path: Path) -> Iterator[Path]:
    """A wheel's port that is there: a pty behind a symlink."""
    pty = PtyWheel(tmp_path / "wheel0")
    try:
        yield pty.link
    finally:
        pty.close()


def _good(tmp_path: Path, port: Path) -> dict[str, dict[str, object]]:
    """A configuration run would start with (broker on a closed port: it retries)."""
    key = tmp_path / "keys" / "signing.key"
    if not key.exists():
        key.parent.mkdir()
        key.write_bytes(Signer.generate().private_pem())
        (key.parent / "signing.pub").write_bytes(Signer.from_file(key).public_pem())
    return {
        "table": {"id": "T9"},
        "wheel": {"port": str(port)},
        "mqtt": {"host": "127.0.0.1", "port": 1},
        "state": {"dir": str(tmp_path / "state")},
        "signing": {"key_file": str(key)},
    }


def _toml(sections: dict[str, dict[str, object]]) -> str:
    lines = []
    for name, keys in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


def _other_tables_journal(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "state" / JOURNAL_FILE)
    journal.claim_table("T1")
    journal.close()


def _port_in_use(tmp_path: Path) -> str:
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    _HELD.append(held)
    return f"127.0.0.1:{held.getsockname()[1]}"


def _socket_refusing(tmp_path: Path, config: dict[str, dict[str, object]]) -> None:
    """A wheel's socket:// port that refuses: bound (so no one else takes it), not listening."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    _HELD.append(held)
    config["wheel"]["port"] = f"socket://127.0.0.1:{held.getsockname()[1]}"


def _port_held(tmp_path: Path, config: dict[str, dict[str, object]]) -> None:
    """The wheel's port, held as a wheeld holds it (pyserial's lock) by another program."""
    held = open(str(config["wheel"]["port"]), "rb", buffering=0)  # noqa: SIM115
    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _HELD.append(held)


_HELD: list[socket.socket | io.FileIO] = []


Case = Callable[[Path, dict[str, dict[str, object]]], str | None]


def _set(section: str, key: str, value: object) -> Case:
    def change(tmp_path: Path, config: dict[str, dict[str, object]]) -> None:
        config.setdefault(section, {})[key] = value

    return change


def _no_key(tmp_path: Path, config: dict[str, dict[str, object]]) -> None:
    del config["signing"]


def _public_key(tmp_path: Path, config: dict[str, dict[str, object]]) -> None:
    config["signing"]["key_file"] = str(tmp_path / "keys" / "signing.pub")


def _bad_key(tmp_path: Path, config: dict[str, dict[str, object]]) -> None:
    bad = tmp_path / "bad.key"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    config["signing"]["key_file"] = str(bad)


def _not_a_device(tmp_path: Path, config: dict[str, dict[str, object]]) -> None:
    (tmp_path / "file").write_text("")
    config["wheel"]["port"] = str(tmp_path / "file")


def _another_table(tmp_path: Path, config: dict[str, dict[str, object]]) -> None:
    _other_tables_journal(tmp_path)


def _metrics_taken(tmp_path: Path, config: dict[str, dict[str, object]]) -> None:
    config["metrics"] = {"listen": _port_in_use(tmp_path)}


def _several(tmp_path: Path, config: dict[str, dict[str, object]]) -> None:
    """The issue's file: a typo, a quoted number, a number for a string, no key."""
    config["mqtt"].update({"prot": "5", "protocol": 5, "hots": "x"})
    config["wheel"].update({"baudrate": "9600"})
    del config["signing"]


def _not_toml(tmp_path: Path, config: dict[str, dict[str, object]]) -> str:
    return "[wheel\n"


CASES: dict[str, Case] = {
    "not TOML": _not_toml,
    "an unknown key": _set("mqtt", "hots", "broker"),
    "a string for a number": _set("wheel", "baudrate", "9600"),
    "a number for a string": _set("mqtt", "protocol", 5),
    "a driver not installed": _set("wheel", "driver", "acme"),
    "a port URL that reaches no wheel": _set("wheel", "port", "loop://"),
    "no signing key": _no_key,
    "a signing key file not there": _set("signing", "key_file", "/nonexistent/signing.key"),
    "the public key for the private": _public_key,
    "a malformed key": _bad_key,
    "a wheel's port not there": _set("wheel", "port", "/dev/wheeld-test-no-such-port"),
    "a wheel's port that is a file": _not_a_device,
    "a wheel's port that is no terminal": _set("wheel", "port", "/dev/null"),
    "a wheel's port another program holds": _port_held,
    "a wheel's socket:// port that refuses": _socket_refusing,
    "a state directory under /proc": _set("state", "dir", "/proc/wheeld"),
    "another table's journal": _another_table,
    "a metrics port in use": _metrics_taken,
    "a password file not there": _set("mqtt", "password_file", "/nonexistent/pw"),
    "several problems at once": _several,
    "a table name over 64 characters": _set("table", "name", "Ruleta " * 10),
    "a table name of two lines": _set("table", "name", "Ruleta\n1"),
    "a client id with a space": _set("mqtt", "client_id", "wheeld T1"),
}


def _run(config: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "wheeld", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("case", list(CASES))
def test_what_run_refuses_check_config_refused_first_in_the_same_words(
    tmp_path: Path, wheel: Path, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = _good(tmp_path, wheel)
    text = CASES[case](tmp_path, sections) or _toml(sections)
    path = tmp_path / "wheeld.toml"
    path.write_text(text)
    try:
        assert wheeld(["check-config", str(path)]) == 1
        checked = capsys.readouterr().err.splitlines()
        ran = _run(path)
    finally:
        while _HELD:
            _HELD.pop().close()
    assert ran.returncode == 1
    assert checked, "check-config said nothing"
    assert ran.stderr.splitlines() == [f"wheeld run: {line}" for line in checked]
    assert not (tmp_path / "state" / JOURNAL_FILE).exists() or case == "another table's journal"


def test_a_port_another_program_holds_is_waited_for_when_asked(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``wheel.wait_for_device``: run waits for a port held (as for one not there), so
    check-config says ok; a port that is no terminal is refused all the same."""
    sections = _good(tmp_path, wheel)
    sections["wheel"]["wait_for_device"] = True
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(sections))
    _port_held(tmp_path, sections)
    try:
        assert wheeld(["check-config", str(path)]) == 0
    finally:
        while _HELD:
            _HELD.pop().close()
    sections["wheel"]["port"] = "/dev/null"
    path.write_text(_toml(sections))
    assert wheeld(["check-config", str(path)]) == 1
    assert "/dev/null: not a serial port" in capsys.readouterr().err


def test_a_usb_pattern_no_device_matches_is_refused_unless_waited_for(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by an attack: check-config said ok to ``hwgrep://nothingmatches``, and run
    then refused it ("no ports found matching regexp")."""
    sections = _good(tmp_path, wheel)
    sections["wheel"]["port"] = "hwgrep://^no-such-adapter-9f3$"
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(sections))
    assert wheeld(["check-config", str(path)]) == 1
    assert "no serial device matches" in capsys.readouterr().err
    sections["wheel"]["wait_for_device"] = True
    path.write_text(_toml(sections))
    assert wheeld(["check-config", str(path)]) == 0


def test_a_usb_pattern_with_n_needs_that_many_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: ``hwgrep://ttyS&n=2`` with one device matching passed check-config,
    and run refused it ("no ports found matching regexp")."""
    import serial.tools.list_ports

    from wheeld.config import WheelConfig
    from wheeld.shell.readiness import port_problems

    one = [("/dev/ttyUSB0", "FT232R", "USB VID:PID=0403:6001")]
    monkeypatch.setattr(serial.tools.list_ports, "grep", lambda pattern: iter(one))
    assert port_problems(WheelConfig(port="hwgrep://0403")) == []
    (line,) = port_problems(WheelConfig(port="hwgrep://0403&n=2"))
    assert "no serial device matches 2 times" in line


def test_a_good_configuration_passes_both(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(_good(tmp_path, wheel)))
    assert wheeld(["check-config", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok\n"


def test_every_problem_is_one_line_naming_the_form_expected(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = _good(tmp_path, wheel)
    _several(tmp_path, sections)
    sections["wheel"]["driver"] = "acme"
    sections["metrics"] = {"listen": "nowhere"}
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(sections))
    assert wheeld(["check-config", str(path)]) == 1
    said = [line.removeprefix(f"{path}: ") for line in capsys.readouterr().err.splitlines()]
    assert set(said) >= {
        f"wheel.driver: unknown driver 'acme' (installed: {INSTALLED})",
        'wheel.baudrate: must be a whole number, not "9600" (a string): '
        "write baudrate = 9600, without quotes",
        'mqtt.protocol: must be "5" or "3.1.1", not 5 (write protocol = "5", in quotes)',
        "mqtt.prot: unknown key (did you mean port?)",
        "mqtt.hots: unknown key (did you mean host?)",
        "metrics.listen: must be HOST:PORT, the port 1-65535 (e.g. 127.0.0.1:9105)",
        "signing.key_file: not set; every game message is signed (wheeld keygen --out DIR "
        "makes a key; signing.required = false runs unsigned)",
    }


def test_a_wrong_section_hides_nothing_of_the_others(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = _good(tmp_path, wheel)
    sections["wheel"]["driver"] = "acme"
    sections["mqtt"]["servers"] = ["127.0.0.1:1883"]  # and mqtt.host: both
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(sections))
    assert wheeld(["check-config", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{path}: wheel.driver: unknown driver 'acme' (installed: {INSTALLED})",
        f"{path}: mqtt.servers: give mqtt.servers or mqtt.host/mqtt.port, not both "
        "(mqtt.host is set too)",
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[mqtt]\nhots = "b"\n', "mqtt.hots: unknown key (did you mean host?)"),
        ("[mqqt]\n", "mqqt: unknown key (did you mean mqtt?)"),
        # Found on the first day: too short for difflib's ratio, so no suggestion.
        ("[mqq]\n", "mqq: unknown key (did you mean mqtt?)"),
        ("[lgo]\n", "lgo: unknown key (did you mean log?)"),
        ("[rules]\nsettle = 900\n", "rules.settle: unknown key (did you mean settle_ms?)"),
        ("[wheel]\nbaudrat = 9600\n", "wheel.baudrat: unknown key (driver 'wrp') (did you"),
        ('[log]\nlevel = "loud"\n', 'log.level: must be "debug", "info", "warning" or "error"'),
        (
            '[wheel]\npockets = "37"\n',
            'must be 37, 38, 39 or 40, not "37" (write pockets = 37, without',
        ),
        ("[mqtt]\nkeepalive_s = 2\n", "mqtt.keepalive_s: must be from 5 to 3,600, not 2"),
        ("[state]\ndecisions_days = 30\n", "state.decisions_days: must be from 365 to 36,500"),
        ("[signing]\nrequired = 1\n", "signing.required: must be true or false"),
        ("[table]\nid = 12\n", "table.id: must be a string in quotes, not 12 (an integer)"),
        (
            f'[table]\nname = "{"Ruleta " * 10}"\n',
            'table.name: must be at most 64 characters long, not "Ruleta Ruleta',
        ),
        ('[table]\nname = " "\n', "table.name: must not be blank or start or end with spaces"),
        ('[table]\nname = "A\\tB"\n', "table.name: must be one line of printable text"),
        ('[table]\ncurrency = "EURO DOLLAR"\n', "table.currency: must be at most 8 characters"),
        ('[table]\ncurrency = "E R"\n', "table.currency: must be a code or a symbol (EUR, US$)"),
        (f'[mqtt]\nclient_id = "{"c" * 129}"\n', "mqtt.client_id: must be 1 to 128 char"),
        ('[mqtt]\nclient_id = "a\\u0000b"\n', "mqtt.client_id: must have no spaces or control"),
        ('[mqtt]\nservers = "a:1"\n', "mqtt.servers: must be a list in brackets"),
        ("marquee = 5\n", "marquee: must be a section ([marquee])"),
        (
            '[alerts]\ndeviation_p_value = "0.01"\n',
            'alerts.deviation_p_value: must be a number, not "0.01" (a string): '
            "write deviation_p_value = 0.01, without quotes",
        ),
    ],
)
def test_a_bad_value_says_the_form_expected(
    tmp_path: Path, text: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "wheeld.toml"
    path.write_text(text)
    assert wheeld(["check-config", str(path)]) == 1
    assert says in capsys.readouterr().err


def test_a_broker_host_that_does_not_resolve_is_refused_by_check_config(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = _good(tmp_path, wheel)
    sections["mqtt"]["host"] = "brokr.casino.invalid"
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(sections))
    assert wheeld(["check-config", str(path)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{path}: mqtt.host: 'brokr.casino.invalid' does not resolve (")
    assert line.endswith("): wheeld run would retry it for ever")


def test_an_explicit_base_topic_of_another_table_is_a_warning(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sections = _good(tmp_path, wheel)
    sections["table"]["id"] = "T8"
    sections["mqtt"]["base_topic"] = "wheeld/T1"
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(sections))
    assert wheeld(["check-config", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{path}: ok\n"
    assert err == (
        f"{path}: warning: mqtt.base_topic: 'wheeld/T1' does not name table.id 'T8': "
        "another table's topics? (left out, it is wheeld/T8)\n"
    )


def test_the_base_topic_follows_the_table_id(tmp_path: Path, wheel: Path) -> None:
    from wheeld.shell.readiness import load_for_run

    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(_good(tmp_path, wheel)))
    config = load_for_run(path, {"WHEELD_TABLE__ID": "'T8'"})
    assert (config.base_topic, config.client_id) == ("wheeld/T8", "wheeld-T8")


def test_a_running_tables_state_directory_is_a_warning(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(_good(tmp_path, wheel)))
    journal = Journal(tmp_path / "state" / JOURNAL_FILE)
    try:
        journal.claim_table("T9")
        assert wheeld(["check-config", str(path)]) == 0
    finally:
        journal.close()
    out, err = capsys.readouterr()
    assert out == f"{path}: ok\n"
    assert f"another wheeld (pid {os.getpid()}) is using it now" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_state_directory_this_user_cannot_make_is_refused(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    sections = _good(tmp_path, wheel)
    sections["state"]["dir"] = str(locked / "T9")
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(sections))
    try:
        assert wheeld(["check-config", str(path)]) == 1
    finally:
        shutil.rmtree(locked, ignore_errors=True)
    assert "state.dir: " in capsys.readouterr().err


def test_a_key_not_found_without_the_credentials_says_where_systemd_has_it(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    sections = _good(tmp_path, wheel)
    sections["signing"]["key_file"] = "signing.key"  # as the units name it
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(sections))
    assert wheeld(["check-config", str(path)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"{path}: signing.key_file: no such file: {tmp_path / 'signing.key'} (under systemd the "
        "unit passes it as a credential: run check-config with "
        "CREDENTIALS_DIRECTORY=/etc/wheeld/credentials/<table>, as docs/operations.md shows)"
    )
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path / "keys"))
    assert wheeld(["check-config", str(path)]) == 0


def test_a_key_beside_the_file_not_among_the_credentials_is_a_warning(
    tmp_path: Path, wheel: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(credentials))
    path = tmp_path / "wheeld.toml"
    path.write_text(_toml(_good(tmp_path, wheel)))
    assert wheeld(["check-config", str(path)]) == 0
    assert "the units pass the key as the credential 'signing.key'" in capsys.readouterr().err
