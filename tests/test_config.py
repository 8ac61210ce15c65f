"""The configuration file: keys, defaults, and errors that name the key."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.helpers import decide, outcomes
from wheeld.cli import main as wheeld
from wheeld.config import Config, ConfigError, driver_settings, load
from wheeld.core.rules import RulesConfig
from wheeld.core.signing import Signer
from wheeld_simulators.physics import SimulatorSettings, WheelSimulator

EXAMPLE = Path(__file__).parent.parent / "config" / "wheeld.toml"


@pytest.fixture
def credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A systemd credentials directory holding the signing key the example names."""
    directory = tmp_path / "credentials"
    directory.mkdir()
    (directory / "signing.key").write_bytes(Signer.generate().private_pem())
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(directory))
    return directory


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What ``run`` needs of the machine, given by the environment: no key required, the
    wheel waited for, a state directory of the test's own (returned)."""
    state = tmp_path / "state"
    monkeypatch.setenv("WHEELD_SIGNING__REQUIRED", "false")
    monkeypatch.setenv("WHEELD_WHEEL__WAIT_FOR_DEVICE", "true")
    monkeypatch.setenv("WHEELD_STATE__DIR", str(state))
    return state


def test_the_example_configuration_is_valid(credentials: Path) -> None:
    config = load(EXAMPLE)
    assert config.table.id == "T1"
    assert config.base_topic == "wheeld/T1"


def test_defaults_follow_the_interface_spec(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("")
    config = load(path)
    assert config.rules.model_dump() == {
        "min_ball_revolutions": 3,
        "settle_ms": 1000,
        "no_more_bets_period_ms": 1400,
        "result_timeout_ms": 15000,
        "rotor_timeout_ms": 8000,
        "link_timeout_ms": 2000,
    }
    assert (config.mqtt.host, config.mqtt.port, config.wheel.driver) == ("127.0.0.1", 1883, "wrp")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[rules]\nmin_ball_revolutions = 2\n", "rules.min_ball_revolutions"),
        ("[rules]\nsettle = 5\n", "rules.settle: unknown key"),
        ('[wheel]\ndriver = "acme"\n', "wheel.driver"),
        ("[wheel]\npockets = 36\n", "wheel.pockets"),
        ('[mqtt]\nbase_topic = "a/+/b"\n', "mqtt.base_topic"),
        ('[mqtt]\nbase_topic = "a//b"\n', "mqtt.base_topic"),
        ('[table]\nid = "T#1"\n', "table.id"),
        ("[mqtt]\nport = 0\n", "mqtt.port"),
        ("[extra]\n", "extra: unknown key"),
    ],
)
def test_a_bad_value_names_its_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert any(key in problem for problem in caught.value.problems)


def test_check_config_reports_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], machine: Path
) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[rules]\nmin_ball_revolutions = 1\nsettle_ms = -1\n[mqtt]\nport = 70000\n")
    assert wheeld(["check-config", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3
    assert all(line.startswith(str(path)) for line in err)


def test_check_config_accepts_a_good_file(
    capsys: pytest.CaptureFixture[str],
    credentials: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The machine as the unit gives it: the state directory, a wheel to wait for.
    monkeypatch.setenv("WHEELD_STATE__DIR", str(tmp_path / "state"))
    monkeypatch.setenv("WHEELD_WHEEL__WAIT_FOR_DEVICE", "true")
    assert wheeld(["check-config", str(EXAMPLE)]) == 0
    assert "ok" in capsys.readouterr().out


def test_a_byte_order_mark_is_named(tmp_path: Path) -> None:
    """Found by an attack: a file saved with a BOM (Notepad's UTF-8) was "not valid TOML:
    Invalid statement (at line 1, column 1)", a line that does not say what is wrong."""
    path = tmp_path / "c.toml"
    path.write_bytes(b'\xef\xbb\xbf[table]\nid = "T1"\n')
    with pytest.raises(ConfigError) as caught:
        load(path, {})
    assert caught.value.problems == ["starts with a byte-order mark: save it as UTF-8 without one"]


@pytest.mark.parametrize("content", [b"[rules\n", b"\xff\xfe"])
def test_unparseable_files_are_one_line(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert len(caught.value.problems) == 1


@pytest.mark.parametrize("depth", [20, 400, 5000])
def test_a_value_nested_too_deep_is_one_line(
    tmp_path: Path, depth: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by review: some 330 levels of arrays ran tomllib (and the wording of the
    error) out of recursion, a traceback from check-config, run, an environment override
    and the archive alike."""
    from wheeld.config import load_archive

    nested = "[" * depth + "]" * depth
    path = tmp_path / "c.toml"
    path.write_text(f"[table]\nx = {nested}\n")
    for read in (load, load_archive):
        with pytest.raises(ConfigError) as caught:
            read(path, {})
        assert caught.value.problems == ["not valid TOML: nested more than 16 levels deep"]
    path.write_text("")
    with pytest.raises(ConfigError) as caught:
        load(path, {"WHEELD_TABLE__X": nested})
    assert str(caught.value) == "WHEELD_TABLE__X: nested more than 16 levels deep"
    path.write_text(f"x = {nested}\n")
    capsys.readouterr()
    assert wheeld(["check-config", str(path)]) == 1
    assert capsys.readouterr().err == f"{path}: not valid TOML: nested more than 16 levels deep\n"


@pytest.mark.parametrize(
    ("text", "deep"),
    [
        ("[table]\nx = " + "[" * 15 + "1" + "]" * 15, False),  # arrays at depths 2 to 16
        ("[table]\nx = " + "[" * 16 + "]" * 16, True),
        (".".join(["a"] * 16) + " = 1", False),  # each part a level: 1 to 16
        (".".join(["a"] * 17) + " = 1", True),
        (".".join(["a"] * 17) + " = []", True),
        ("[" + ".".join(["a"] * 16) + "]", False),
        ("[" + ".".join(["a"] * 17) + "]", True),
        ("[[" + ".".join(["a"] * 17) + "]]", True),
        (".".join(["a"] * 20_000) + " = 1", True),  # tomllib alone: 9 s and 1.6 GB
        ("[" + ".".join(["a"] * 160_000) + "]", True),
        # A comment's dots, or a line with no key, are no key's parts.
        ("# " + "." * 80 + "\n[table]\nx = 1", False),
        ("# a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r = 1\n[table]\nx = 1", False),
        # Found by review: a comment inside a list, a string that looks like a header.
        (
            '[mqtt]\nservers = [\n  "127.0.0.1:1883",  # b1.f2.c.e.com, see 4.2.1 (v.2.3.1),'
            " RFC 3.1.1 e.g. keepalive=60\n]",
            False,
        ),
        ('[table]\nname = """\n[a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r]\n"""', False),
        # An inline table's dotted key, which tomllib took 37 s over at 128,000 parts.
        ("[metrics]\nx = {" + ".".join(["a"] * 128_000) + " = 1}", True),
    ],
)
def test_nesting_is_counted_from_the_top_level_dotted_keys_too(
    tmp_path: Path, text: str, deep: bool
) -> None:
    """Found by review: a long dotted key or header took tomllib time and memory that
    grow with the square of its parts before the depth was looked at."""
    path = tmp_path / "c.toml"
    path.write_text(text + "\n")
    try:
        load(path, {})
        said = ""
    except ConfigError as error:
        said = str(error)
    assert ("nested more than 16 levels deep" in said) == deep, said


def test_an_environment_override_nests_from_its_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("")
    arrays = "[" * 15 + "1" + "]" * 15  # at depths 2 to 16 under table.x, as in a file
    for environ, deep in [
        ({"WHEELD_TABLE__X": arrays}, False),
        ({"WHEELD_TABLE__X": "[" + arrays + "]"}, True),
        ({"WHEELD_" + "__".join(["X"] * 17): "1"}, True),
        ({"WHEELD_METRICS__X": "{" + ".".join(["a"] * 20_000) + " = 1}"}, True),
    ]:
        with pytest.raises(ConfigError) as caught:
            load(path, environ)
        assert ("nested more than 16 levels deep" in str(caught.value)) == deep, environ


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "absent.toml")


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[mqtt]\nhost = "a"\nport = 1883\n')
    config = load(
        path,
        {
            "WHEELD_MQTT__HOST": "broker.local",
            "WHEELD_MQTT__PORT": "1884",
            "WHEELD_RULES__MIN_BALL_REVOLUTIONS": "4",
            "OTHER": "x",
        },
    )
    assert (config.mqtt.host, config.mqtt.port) == ("broker.local", 1884)
    assert config.rules.min_ball_revolutions == 4


def test_a_bad_environment_value_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("")
    with pytest.raises(ConfigError) as caught:
        load(path, {"WHEELD_RULES__MIN_BALL_REVOLUTIONS": "1", "WHEELD_MQTT__NOPE": "1"})
    text = "\n".join(caught.value.problems)
    assert "rules.min_ball_revolutions" in text and "mqtt.nope: unknown key" in text


def test_secrets_come_from_the_credentials_directory(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "mqtt-password").write_text("s3cret\n")
    path = tmp_path / "c.toml"
    path.write_text('[mqtt]\nusername = "wheeld"\npassword_file = "mqtt-password"\n')
    config = load(path, {"CREDENTIALS_DIRECTORY": str(creds)})
    assert config.mqtt.password == "s3cret"
    assert "s3cret" not in repr(config)


def test_a_missing_secret_file_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[mqtt]\npassword_file = "nope"\n[mqtt.tls]\nca_file = "ca.pem"\n')
    with pytest.raises(ConfigError) as caught:
        load(path, {})
    text = "\n".join(caught.value.problems)
    assert "mqtt.password_file" in text and "mqtt.tls.ca_file" in text


def test_a_secret_file_that_cannot_be_looked_at_is_one_line(tmp_path: Path) -> None:
    """Found by an attack: a key in a directory the user may not enter, a name too long
    or a loop of links was an OSError traceback (from check-config, run, marquee)."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    too_long = tmp_path / ("x" * 300) / "k"
    for path, why in ((too_long, "File name too long"), (loop, "symbolic links")):
        text = f'[signing]\nkey_file = "{path}"\n[mqtt]\npassword_file = "{path}"\n'
        problems = _problems(tmp_path, text)
        for key in ("signing.key_file", "mqtt.password_file"):
            (line,) = [problem for problem in problems if f": {key}: " in problem]
            assert f"{key}: {path}: cannot look at it: " in line and why in line, line


def _problems(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> list[str]:
    """Every problem line of a configuration, as check-config would print them."""
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load(path, environ or {})
    return [str(report) for report in caught.value.reports]


@pytest.mark.parametrize(
    "host", ["", " ", "broker:1883", "mqtt://broker", "[::1]", "256.1.1.1", "a..b", "-a.lan"]
)
def test_an_implausible_broker_host_is_refused(tmp_path: Path, host: str) -> None:
    (line,) = _problems(tmp_path, f'[mqtt]\nhost = "{host}"\n')
    assert "mqtt.host: must be a host name or an IP address" in line


@pytest.mark.parametrize("listen", ["nohost!!:8080", "8080", ":8080", "host:0", "host:x", "[::1]"])
def test_a_marquee_address_that_cannot_be_served_is_refused(tmp_path: Path, listen: str) -> None:
    (line,) = _problems(tmp_path, f'[marquee]\nlisten = "{listen}"\n')
    assert line.startswith("marquee.listen:") or "marquee.listen" in line, line


@pytest.mark.parametrize("listen", ["127.0.0.1:8080", "[::1]:8080", "board.lan:80", "0.0.0.0:8080"])
def test_a_marquee_address_of_any_kind_is_accepted(tmp_path: Path, listen: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[marquee]\nlisten = "{listen}"\n')
    assert load(path, {}).marquee.listen == listen


@pytest.mark.parametrize("host", ["broker.casino.lan", "mqtt_1", "10.0.0.5", "::1", "localhost."])
def test_host_names_and_addresses_are_accepted(tmp_path: Path, host: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[mqtt]\nhost = "{host}"\n')
    assert load(path, {}).mqtt.host == host


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[rules]\nsettle_ms = true\n", "rules.settle_ms"),
        ("[rules]\nlink_timeout_ms = 2000.0\n", "rules.link_timeout_ms"),
        ("[mqtt]\nport = true\n", "mqtt.port"),
        ('[mqtt]\nport = "1883"\n', "mqtt.port"),
        ("[wheel]\nwait_for_device = 1\n", "wheel.wait_for_device"),
        (
            '[wheel]\ndriver = "cammegh-ss2"\n[wheel.control]\npoll_s = true\n',
            "wheel.control.poll_s",
        ),
        ("[marquee]\nstats_games = false\n", "marquee.stats_games"),
    ],
)
def test_numbers_and_booleans_are_strict(tmp_path: Path, text: str, key: str) -> None:
    (line,) = _problems(tmp_path, text)
    assert f": {key}: " in line


def test_a_float_key_takes_a_toml_integer(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[wheel]\ndriver = "cammegh-ss2"\n[wheel.control]\nbets_open_s = 10\n'
        '[state]\ndir = "/tmp/w"\n'
    )
    config = load(path, {})
    assert driver_settings(config).bets_open_s == 10.0 and config.state.dir == Path("/tmp/w")


def test_a_driver_section_belongs_to_its_driver(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, "[wheel.control]\nenabled = true\n")
    assert "wheel.control: unknown key (driver 'wrp')" in line
    (line,) = _problems(tmp_path, '[wheel]\ndriver = "cammegh-ss2"\n[wheel.control]\nspeed = 1\n')
    assert "wheel.control.speed: unknown key" in line
    (line,) = _problems(tmp_path, '[wheel]\ndriver = "acme"\n')
    assert "wheel.driver: unknown driver 'acme' (installed: " in line


def test_rules_built_in_code_are_strict_too() -> None:
    with pytest.raises(ValidationError):
        RulesConfig(settle_ms=True)


@pytest.mark.parametrize(
    ("key", "low", "high"),
    [
        ("settle_ms", 500, 2_000),
        ("no_more_bets_period_ms", 500, 5_000),
        ("result_timeout_ms", 5_000, 120_000),
        ("rotor_timeout_ms", 5_000, 60_000),
        ("link_timeout_ms", 1_500, 60_000),
        ("min_ball_revolutions", 3, 15),
    ],
)
def test_every_rule_has_bounds(key: str, low: int, high: int) -> None:
    RulesConfig.model_validate({key: low})
    RulesConfig.model_validate({key: high})
    for outside in (low - 1, high + 1):
        with pytest.raises(ValidationError):
            RulesConfig.model_validate({key: outside})


def test_the_result_timeout_leaves_room_for_the_drop_and_the_settle_time(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, "[rules]\nsettle_ms = 2000\nresult_timeout_ms = 5500\n")
    assert "rules.result_timeout_ms: must be at least settle_ms + 4000 (6000)" in line


def test_a_polled_wheel_needs_a_link_timeout_of_several_polls(tmp_path: Path) -> None:
    polled = (
        '[wheel]\ndriver = "cammegh-ss2"\n'
        "[wheel.control]\nenabled = true\noperating_mode = 1031\npoll_s = 1.0\n"
    )
    (line,) = _problems(tmp_path, polled + "[rules]\nlink_timeout_ms = 2000\n")
    assert "rules.link_timeout_ms: must be at least 3 x wheel.control.poll_s (3000 ms)" in line
    path = tmp_path / "ok.toml"
    path.write_text(polled + "[rules]\nlink_timeout_ms = 3000\n")
    load(path, {})


@pytest.mark.parametrize(
    "rules",
    [
        RulesConfig(
            settle_ms=500,
            no_more_bets_period_ms=500,
            result_timeout_ms=5_000,
            rotor_timeout_ms=5_000,
            link_timeout_ms=1_500,
        ),
        RulesConfig(
            settle_ms=2_000,
            no_more_bets_period_ms=5_000,
            result_timeout_ms=120_000,
            rotor_timeout_ms=60_000,
            link_timeout_ms=60_000,
        ),
        RulesConfig(settle_ms=2_000, result_timeout_ms=6_000),
    ],
    ids=["lowest", "highest", "tightest"],
)
def test_no_valid_rules_void_every_game(rules: RulesConfig) -> None:
    simulator = WheelSimulator(SimulatorSettings(seed=11))
    plans = [plan for _ in range(20) for plan in simulator.play()]
    got = outcomes(decide(simulator.wheel, rules=rules))
    assert [number for _, number in got] == [plan.expected for plan in plans]


@pytest.mark.parametrize(
    ("base", "prefix", "problem"),
    [
        ("$SYS/wheeld", None, "mqtt.base_topic: must not start with '$'"),
        ("a/#", None, "mqtt.base_topic: must be MQTT topic levels joined by"),
        ("a/", None, "mqtt.base_topic: must be MQTT topic levels joined by"),
        ("x" * 201, None, "mqtt.base_topic: must be at most 200 characters long, not"),
        (None, "replies", "mqtt.reply_prefix: must end with '/'"),
        (None, "$replies/", "mqtt.reply_prefix: must not start with '$'"),
        (None, "re/+/", "mqtt.reply_prefix: must be MQTT topic levels joined by"),
        (None, "wheeld/T1/", "mqtt.reply_prefix: must not be the base topic 'wheeld/T1'"),
        (None, "wheeld/T1/replies/", "mqtt.reply_prefix: must not be the base topic"),
        (None, "wheeld/", "mqtt.reply_prefix: must not be the base topic"),
    ],
)
def test_topics_are_refused_with_their_key(
    tmp_path: Path, base: str | None, prefix: str | None, problem: str
) -> None:
    text = "[mqtt]\n"
    text += "" if base is None else f'base_topic = "{base}"\n'
    text += "" if prefix is None else f'reply_prefix = "{prefix}"\n'
    (line,) = _problems(tmp_path, text)
    assert problem in line


@pytest.mark.parametrize("table", ["$T1", "T/1", "T+1", "", "T\\u00011", "T" * 65])
def test_a_table_id_that_is_no_topic_level_is_refused(tmp_path: Path, table: str) -> None:
    (line,) = _problems(tmp_path, f'[table]\nid = "{table}"\n')
    assert ": table.id: " in line


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # Found by an attack: each was accepted.
        ('[table]\nid = "T 1"\n', "table.id: must not hold spaces or invisible characters"),
        ('[table]\nid = " "\n', "table.id: must not hold spaces or invisible characters"),
        ('[table]\nid = "T\\u202e1"\n', "table.id: must not hold spaces or invisible"),
        ('[table]\nid = "T\\u200b1"\n', "table.id: must not hold spaces or invisible"),
        ("[table]\nmin_bet = inf\n", "table.min_bet: must be a finite number, not inf"),
        ("[table]\nmax_bet = nan\n", "table.max_bet: must be a finite number, not nan"),
        ("[table]\nmin_bet = 10\nmax_bet = 5\n", "table: max_bet 5 is below min_bet 10"),
        ('[state]\ndir = "/"\n', "state.dir: must not be the root directory"),
        ('[state]\ndir = "/tmp/.."\n', "state.dir: must not be the root directory"),
    ],
)
def test_a_table_staff_cannot_read_or_a_state_dir_at_the_root_is_refused(
    tmp_path: Path, text: str, said: str
) -> None:
    (line,) = _problems(tmp_path, text)
    assert said in line, line


def test_bets_and_ids_that_read_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[table]\nid = "Ruleta-1"\nmin_bet = 5\nmax_bet = 5\n')
    table = load(path, {}).table
    assert (table.id, table.min_bet, table.max_bet) == ("Ruleta-1", 5, 5)


def test_the_reply_prefix_is_empty_by_default_and_may_be_set(tmp_path: Path) -> None:
    """Empty: replies go to any response topic the sender names (MQTT 5's way), the
    table's own topics aside; set, only under it."""
    path = tmp_path / "c.toml"
    path.write_text('[mqtt]\nreply_prefix = "casino/replies/"\n')
    assert Config().mqtt.reply_prefix == ""
    assert load(path, {}).mqtt.reply_prefix == "casino/replies/"
    path.write_text('[table]\nid = "T1"\n[mqtt]\nreply_prefix = ""\n')
    assert load(path, {}).mqtt.reply_prefix == ""


def test_an_environment_error_is_blamed_on_the_variable(tmp_path: Path) -> None:
    lines = _problems(
        tmp_path,
        "[rules]\nsettle_ms = true\n",
        {"WHEELD_MQTT__PORT": "true", "WHEELD_MQTT__TLS__NOPE": "1", "WHEELD_X__": "1"},
    )
    path = tmp_path / "c.toml"
    assert sorted(lines) == sorted(
        [
            "WHEELD_X__: not of the form WHEELD_<SECTION>__<KEY>",
            "WHEELD_MQTT__PORT: mqtt.port: must be a whole number, not true (a boolean)",
            "WHEELD_MQTT__TLS__NOPE: mqtt.tls.nope: unknown key "
            "(known here: ca_file, cert_file, insecure, key_file)",
            f"{path}: rules.settle_ms: must be a whole number, not true (a boolean)",
        ]
    )


def test_a_section_an_environment_variable_made_is_blamed_on_it(tmp_path: Path) -> None:
    """Found by review: ``WHEELD_A__B`` was "c.toml: a: unknown key", the file blamed
    for a section only the variable had made."""
    first, second = sorted(_problems(tmp_path, "", {"WHEELD_A__B": "1", "WHEELD_MQTT__X__Y": "1"}))
    assert first.startswith("WHEELD_A__B: a: unknown key (known here: alerts, ")
    assert second == "WHEELD_MQTT__X__Y: mqtt.x: unknown key"


def test_a_secret_file_named_by_the_environment_is_blamed_on_it(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, "", {"WHEELD_MQTT__PASSWORD_FILE": str(tmp_path / "nope")})
    assert line.startswith("WHEELD_MQTT__PASSWORD_FILE: mqtt.password_file: no such file")


def test_check_config_blames_the_variable(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    machine: Path,
) -> None:
    path = tmp_path / "c.toml"
    path.write_text("")
    monkeypatch.setenv("WHEELD_RULES__LINK_TIMEOUT_MS", "1")
    assert wheeld(["check-config", str(path)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("WHEELD_RULES__LINK_TIMEOUT_MS: rules.link_timeout_ms: ")


def test_a_password_file_over_mqtt_s_limit_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pw").write_bytes(b"x" * 65_536)
    (line,) = _problems(tmp_path, '[mqtt]\npassword_file = "pw"\n')
    assert "mqtt.password_file: over" in line


def test_the_longest_password_fits(tmp_path: Path) -> None:
    (tmp_path / "pw").write_bytes(b"x" * 65_535 + b"\n")
    path = tmp_path / "c.toml"
    path.write_text('[mqtt]\npassword_file = "pw"\n')
    assert load(path, {}).mqtt.password == "x" * 65_535


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "unreadable"])
def test_a_password_file_that_is_no_readable_file_is_one_line(tmp_path: Path, kind: str) -> None:
    secret = tmp_path / "pw"
    match kind:
        case "fifo":
            os.mkfifo(secret)
        case "directory":
            secret.mkdir()
        case "device":
            secret = Path("/dev/zero")
        case "unreadable":
            if os.geteuid() == 0:
                pytest.skip("root reads any file")
            secret.write_text("s3cret")
            secret.chmod(0)
    (line,) = _problems(tmp_path, f'[mqtt]\npassword_file = "{secret}"\n')
    assert ": mqtt.password_file: " in line and "\n" not in line


def test_an_inline_password_over_mqtt_s_limit_is_refused(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, f'[mqtt]\npassword = "{"x" * 65_536}"\n')
    assert "mqtt.password: over 65,535 bytes" in line


@pytest.mark.parametrize("target", ["/dev/zero", "directory", "fifo", "huge"])
def test_only_a_regular_file_of_bounded_size_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    path = tmp_path / "c.toml"
    match target:
        case "/dev/zero":
            path = Path(target)
        case "directory":
            path.mkdir()
        case "fifo":
            os.mkfifo(path)  # nobody writes: reading it would wait forever
        case "huge":
            path.write_text("# padding\n" * 110_000)
    assert wheeld(["check-config", str(path)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{path}: cannot read: ")


def test_run_refuses_the_same_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert wheeld(["run", "--config", "/dev/zero"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == "wheeld run: /dev/zero: cannot read: not a regular file"


def test_check_config_says_when_every_value_is_a_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], machine: Path
) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("# nothing set yet\n")
    assert wheeld(["check-config", str(empty)]) == 0
    assert capsys.readouterr().out == f"{empty}: ok (empty: every value is a default)\n"
    some = tmp_path / "some.toml"
    some.write_text("[rules]\nsettle_ms = 1000\n")
    assert wheeld(["check-config", str(some)]) == 0
    assert capsys.readouterr().out == f"{some}: ok\n"


@pytest.mark.parametrize(
    ("port", "says"),
    [
        ("loop://", "loop:// is not allowed (pyserial's loopback"),
        ("LOOP://", "loop:// is not allowed"),
        ("rfc2217://wheel:4000", "rfc2217:// is not allowed"),
        ("spy:///dev/ttyUSB0", "spy:// is not allowed"),
        ("alt:///dev/ttyUSB0?class=PosixPollSerial", "alt:// is not allowed"),
        ("gopher://wheel", "gopher:// is not allowed"),
        ("socket://", "socket:// must name a host and a port"),
        ("socket://wheel", "socket:// must name a host and a port"),
        ("socket://wheel:0", "socket:// must name a host and a port"),
        ("socket://wheel:70000", "socket:// must name a host and a port"),
        ("socket://:7000", "socket:// must name a host and a port"),
        ("hwgrep://", "hwgrep:// must have a pattern"),
        # Found by an attack: check-config said ok, run refused them in pyserial's words.
        ("hwgrep://[(", "hwgrep://: not a URL pyserial reads (Invalid IPv6 URL)"),
        ("hwgrep://(", "hwgrep://: '(' is not a regular expression (missing )"),
        ("hwgrep://x{99999999999}", "hwgrep://: 'x{99999999999}' is not a regular expression"),
        ("hwgrep://" + "(" * 1000 + ")" * 1000, "hwgrep://: '" + "(" * 40 + "' is not a"),
        ("HWGREP://ttyS", "write hwgrep:// in lower case, as pyserial reads it"),
        ("hwgrep://0403&n=1", "hwgrep://: 'n=1' is no option (n=N from 2, or skip_busy)"),
        ("hwgrep://0403&fast", "hwgrep://: 'fast' is no option"),
    ],
)
def test_a_port_url_that_reaches_no_wheel_is_refused(tmp_path: Path, port: str, says: str) -> None:
    (line,) = _problems(tmp_path, f'[wheel]\nport = "{port}"\n')
    assert f"wheel.port: {says}" in line


@pytest.mark.parametrize(
    "port",
    [
        "/dev/ttyUSB0",
        "socket://127.0.0.1:7000",
        "SOCKET://wheel.lan:7000",
        "hwgrep://0403:6001",
        "hwgrep://0403:6001&n=2&skip_busy",
    ],
)
def test_device_paths_and_wheel_urls_are_accepted(tmp_path: Path, port: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[wheel]\nport = "{port}"\n')
    assert load(path, {}).wheel.port == port


@pytest.mark.parametrize(
    ("directory", "says"),
    [
        ("", "must not be empty"),
        ("relative", "must be an absolute path"),
        ("./state", "must be an absolute path"),
        ("/dev/zero", "must not be under /dev"),
        ("/dev/null/x", "must not be under /dev"),
        ("/proc/x", "must not be under /proc"),
        ("/sys/wheeld", "must not be under /sys"),
        ("/var/../proc/x", "must not be under /proc"),
    ],
)
def test_a_state_dir_no_journal_can_live_in_is_refused(
    tmp_path: Path, directory: str, says: str
) -> None:
    (line,) = _problems(tmp_path, f'[state]\ndir = "{directory}"\n')
    assert f"state.dir: {says}" in line


def test_a_state_dir_that_is_a_file_or_under_one_or_a_link_to_proc_is_refused(
    tmp_path: Path,
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    (tmp_path / "proc").symlink_to("/proc/self")
    for directory, says in [
        (afile, f"{afile} exists and is not a directory"),
        (afile / "x", f"{afile} exists and is not a directory"),
        (tmp_path / "proc" / "x", "must not be under /proc"),
    ]:
        (line,) = _problems(tmp_path, f'[state]\ndir = "{directory}"\n')
        assert f"state.dir: {says}" in line


def test_a_state_dir_yet_to_be_made_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[state]\ndir = "{tmp_path / "not" / "yet"}"\n')
    assert load(path, {}).state.dir == tmp_path / "not" / "yet"


needs_openssl = pytest.mark.skipif(
    shutil.which("openssl") is None, reason="the openssl command-line tool is not installed"
)


def test_a_ca_file_without_certificates_is_refused(tmp_path: Path) -> None:
    (line,) = _problems(tmp_path, '[mqtt.tls]\nca_file = "/etc/passwd"\n')
    assert line.endswith(
        "mqtt.tls.ca_file: /etc/passwd: no PEM certificates (NO_CERTIFICATE_OR_CRL_FOUND)"
    )


def test_a_client_key_without_its_certificate_is_refused(tmp_path: Path) -> None:
    """Found by review: it passed check-config and turned TLS on with no client
    certificate, the key unused."""
    from wheeld.config import load_archive

    key = tmp_path / "client.key"
    key.write_text("not read: the certificate it belongs to is missing")
    (line,) = _problems(tmp_path, f'[mqtt.tls]\nkey_file = "{key}"\n')
    assert line.endswith(
        "mqtt.tls.key_file: set without mqtt.tls.cert_file, the client "
        "certificate the key belongs to"
    )
    path = tmp_path / "archive.toml"
    archive = '[archive]\ndsn = "postgresql:///x"\ntables = ["wheeld/+"]\n'
    path.write_text(f'{archive}[mqtt.tls]\nkey_file = "{key}"\n')
    with pytest.raises(ConfigError, match=r"mqtt\.tls\.key_file: set without mqtt\.tls\.cert_file"):
        load_archive(path, {})


@needs_openssl
def test_tls_files_are_loaded_as_the_client_will(tmp_path: Path) -> None:
    from tests.tls import make_authority

    authority = make_authority(tmp_path, "ca")
    good = (
        f'[mqtt.tls]\nca_file = "{authority.cert}"\n'
        f'cert_file = "{authority.cert}"\nkey_file = "{authority.key}"\n'
    )
    path = tmp_path / "c.toml"
    path.write_text(good)
    assert load(path, {}).mqtt.tls.cert_file == authority.cert
    stranger = make_authority(tmp_path, "stranger")
    (line,) = _problems(
        tmp_path, f'[mqtt.tls]\ncert_file = "{authority.cert}"\nkey_file = "{stranger.key}"\n'
    )
    assert f"mqtt.tls.cert_file: {authority.cert} with {stranger.key}: not a PEM" in line
    (line,) = _problems(tmp_path, f'[mqtt.tls]\ncert_file = "{authority.cert}"\n')
    assert f"mqtt.tls.cert_file: {authority.cert}: not a PEM certificate and its" in line
    encrypted = tmp_path / "encrypted.key"
    with encrypted.open("wb") as out:
        subprocess.run(
            ["openssl", "pkey", "-in", str(authority.key), "-aes256", "-passout", "pass:secret"],
            check=True,
            stdout=out,
        )
    (line,) = _problems(
        tmp_path, f'[mqtt.tls]\ncert_file = "{authority.cert}"\nkey_file = "{encrypted}"\n'
    )
    assert "mqtt.tls.key_file: the private key is encrypted" in line


def test_the_board_and_displays_never_need_the_signing_key(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[signing]\nkey_file = "signing.key"\n')
    with pytest.raises(ConfigError, match=r"signing\.key_file: no such file"):
        load(path, {})
    assert load(path, {}, signing_key=False).signing.key_file == Path("signing.key")
