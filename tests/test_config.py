"""The configuration file: keys, defaults, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from wheeld.cli import main as wheeld
from wheeld.config import ConfigError, load

EXAMPLE = Path(__file__).parent.parent / "config" / "wheeld.toml"


def test_the_example_configuration_is_valid() -> None:
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
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[rules]\nmin_ball_revolutions = 1\nsettle_ms = -1\n[mqtt]\nport = 70000\n")
    assert wheeld(["check-config", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3
    assert all(line.startswith(str(path)) for line in err)


def test_check_config_accepts_a_good_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert wheeld(["check-config", str(EXAMPLE)]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"[rules\n", b"\xff\xfe"])
def test_unparseable_files_are_one_line(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load(path)
    assert len(caught.value.problems) == 1


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
