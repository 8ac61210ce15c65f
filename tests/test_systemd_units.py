"""The systemd units: hardened to 1.5 or better, `systemd-analyze verify` clean, and
what the template hands wheeld (its table, state directory and credentials) is what
docs/operations.md says and what the configuration reads."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from wheeld.config import load
from wheeld.testing.rig import make_signing_key

UNITS = Path(__file__).parent.parent / "systemd"
ANALYZE = shutil.which("systemd-analyze")
needs_analyze = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")


def installed_copy(unit: str, tmp_path: Path, name: str | None = None) -> Path:
    # verify checks that ExecStart exists: point it at this checkout's wheeld.
    wheeld = shutil.which("wheeld") or str(Path(sys.executable).parent / "wheeld")
    text = (UNITS / unit).read_text().replace("/opt/wheeld/bin/wheeld", wheeld)
    path = tmp_path / (name or unit)
    path.write_text(text)
    return path


def exposure(unit: str) -> float:
    """``systemd-analyze security``'s overall exposure level of the shipped ``unit``."""
    out = subprocess.run(
        [ANALYZE, "security", "--offline=yes", str(UNITS / unit)],  # type: ignore[list-item]
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out.stdout)
    assert match, out.stdout + out.stderr
    return float(match.group(1))


def assert_verifies_clean(path: Path) -> None:
    """``systemd-analyze verify`` passes ``path`` with nothing to say."""
    out = subprocess.run(
        [ANALYZE, "verify", str(path)],  # type: ignore[list-item]
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr


@needs_analyze
@pytest.mark.parametrize(
    "unit",
    ["wheeld.service", "wheeld@.service", "wheeld-verify@.service", "wheeld-archive.service"],
)
def test_unit_exposure_is_at_most_1_5(unit: str) -> None:
    assert exposure(unit) <= 1.5


@needs_analyze
@pytest.mark.parametrize(
    ("unit", "name"),
    [
        ("wheeld.service", None),
        ("wheeld@.service", "wheeld@T1.service"),
        ("wheeld-verify@.service", "wheeld-verify@T1.service"),
        ("wheeld-verify@.timer", "wheeld-verify@T1.timer"),
        ("wheeld-archive.service", None),
    ],
)
def test_unit_verifies_clean(unit: str, name: str | None, tmp_path: Path) -> None:
    path = installed_copy(unit, tmp_path, name)
    assert_verifies_clean(path)


def test_units_use_the_daemon_interfaces() -> None:
    for unit in ("wheeld.service", "wheeld@.service"):
        text = (UNITS / unit).read_text()
        for needle in (
            "Type=notify",
            "WatchdogSec=",
            "StateDirectory=",
            "LoadCredential=",
            "DeviceAllow=char-ttyUSB rw",
            "run --config",
        ):
            assert needle in text, (unit, needle)


def test_the_archive_unit_runs_the_archive_with_the_documented_file(tmp_path: Path) -> None:
    """The archive's unit: notify, its own file, nothing of a table (no device, no key),
    and the configuration docs/archive.md shows loads as the unit would read it."""
    from wheeld.config import load_archive

    text = (UNITS / "wheeld-archive.service").read_text()
    for needle in ("Type=notify", "archive --config /etc/wheeld/archive.toml", "DynamicUser=yes"):
        assert needle in text, needle
    assert "DeviceAllow=" not in text and "LoadCredential=signing" not in text
    lines = (Path(__file__).parent.parent / "docs" / "archive.md").read_text().splitlines()
    start = lines.index("cat > /etc/wheeld/archive.toml <<'END'") + 1
    documented = "\n".join(lines[start : lines.index("END", start)]) + "\n"
    config_file = tmp_path / "archive.toml"
    config_file.write_text(documented.replace("/etc/wheeld/keys", str(tmp_path)))
    for table in ("T1", "T2"):
        (tmp_path / table).mkdir()
        make_signing_key(tmp_path / table)
        (tmp_path / f"{table}.pub").write_bytes((tmp_path / table / "signing.pub").read_bytes())
    settings = load_archive(config_file, {})
    assert settings.archive.tables == ["wheeld/+"]
    assert sorted(settings.archive.trusted_keys) == ["T1", "T2"]


def test_the_archive_unit_never_gives_up_on_a_database_away_at_start() -> None:
    """A database unreachable at start ends the archive in one line, and systemd starts
    it again 5 s later: under a start limit (10 in 600 s) a database away for a minute
    at boot would leave the archive stopped for good."""
    text = (UNITS / "wheeld-archive.service").read_text()
    directives = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[0] != "#"
    )
    assert directives["Restart"] == "on-failure" and directives["RestartSec"] == "5s"
    assert directives["StartLimitIntervalSec"] == "0" and "StartLimitBurst" not in directives


TEMPLATE = "wheeld@.service"
OPERATIONS = Path(__file__).parent.parent / "docs" / "operations.md"


def _settings(key: str, instance: str, unit: str = TEMPLATE) -> list[str]:
    """A setting's items as systemd reads them: quoting as in systemd.syntax(7)
    (whole items in quotes, which go), and %i the instance."""
    items = []
    for line in (UNITS / unit).read_text().splitlines():
        if line.startswith(f"{key}="):
            items += shlex.split(line.removeprefix(f"{key}=").replace("%i", instance))
    return items


def _documented(opening: str, closing: str = "END") -> str:
    """The lines of docs/operations.md after ``opening`` up to ``closing``."""
    lines = OPERATIONS.read_text().splitlines()
    start = lines.index(opening) + 1
    return "\n".join(lines[start : lines.index(closing, start)]) + "\n"


def _as_the_unit_runs_it(instance: str, tmp_path: Path) -> dict[str, str]:
    """The environment wheeld@<instance> gives wheeld: the unit's Environment= and
    $CREDENTIALS_DIRECTORY holding what LoadCredential= loads (the key keygen made)."""
    environ = dict(item.split("=", 1) for item in _settings("Environment", instance))
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    for item in _settings("LoadCredential", instance):
        name, source = item.split(":", 1)
        # Where the documented `wheeld keygen --out /etc/wheeld/credentials/T1` writes it.
        assert (name, source) == ("signing.key", f"/etc/wheeld/credentials/{instance}/signing.key")
        make_signing_key(credentials)
    return {**environ, "CREDENTIALS_DIRECTORY": str(credentials)}


@pytest.mark.parametrize("instance", ["T1", "12"])
def test_the_instance_is_the_table(instance: str, tmp_path: Path) -> None:
    """The documented T1.toml sets no table: the instance name is its id (a number too)."""
    config_file = tmp_path / f"{instance}.toml"
    config_file.write_text(_documented("cat > /etc/wheeld/T1.toml <<'END'"))
    config = load(config_file, _as_the_unit_runs_it(instance, tmp_path))
    assert config.table.id == instance
    assert config.base_topic == f"wheeld/{instance}"
    assert config.client_id == f"wheeld-{instance}"
    assert config.state.dir == Path(f"/var/lib/wheeld/{instance}")
    assert config.signing.key_file == tmp_path / "credentials" / "signing.key"


def test_the_instance_overrides_a_table_in_the_file(tmp_path: Path) -> None:
    config_file = tmp_path / "T2.toml"
    config_file.write_text('[table]\nid = "T1"\n[signing]\nkey_file = "signing.key"\n')
    config = load(config_file, _as_the_unit_runs_it("T2", tmp_path))
    assert (config.table.id, config.base_topic) == ("T2", "wheeld/T2")


def test_documented_check_config_passes(tmp_path: Path) -> None:
    """`check-config` as docs/operations.md runs it, on the documented file and key."""
    config_file = tmp_path / "T1.toml"
    config_file.write_text(_documented("cat > /etc/wheeld/T1.toml <<'END'"))
    environ = _as_the_unit_runs_it("T1", tmp_path)
    documented = {
        "CREDENTIALS_DIRECTORY": environ["CREDENTIALS_DIRECTORY"],
        "WHEELD_TABLE__ID": "T1",
        # As the unit gives it (StateDirectory=): the docs' line names /var/lib/wheeld/T1.
        "WHEELD_STATE__DIR": str(tmp_path / "state" / "T1"),
    }
    out = subprocess.run(
        [sys.executable, "-m", "wheeld", "check-config", str(config_file)],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("WHEELD_")},
            **documented,
        },
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@needs_analyze
def test_documented_password_drop_in_verifies(tmp_path: Path) -> None:
    unit = installed_copy(TEMPLATE, tmp_path, "wheeld@T1.service")
    drop_ins = tmp_path / "wheeld@T1.service.d"
    drop_ins.mkdir()
    drop_in = _documented("cat > /etc/systemd/system/wheeld@.service.d/mqtt-password.conf <<'END'")
    assert "LoadCredential=mqtt-password:/etc/wheeld/credentials/%i/mqtt-password" in drop_in
    (drop_ins / "mqtt-password.conf").write_text(drop_in)
    assert_verifies_clean(unit)


def test_shipped_units_need_no_password_file() -> None:
    """Only the signing key is a credential the units cannot start without."""
    for unit in ("wheeld.service", TEMPLATE):
        credentials = [item.split(":", 1)[0] for item in _settings("LoadCredential", "T1", unit)]
        assert credentials == ["signing.key"], (unit, credentials)


def _serves_or_decides(unit: Path) -> bool:
    """A unit that runs the daemon (``wheeld run``) or serves connections (``wheeld marquee``)."""
    execs = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart=")]
    return any(f"/wheeld {command} " in line for line in execs for command in ("run", "marquee"))


def test_every_unit_that_serves_or_decides_has_descriptors_for_all_its_connections() -> None:
    """Found: at 1024 open files, idle connections timed real requests out (a process out
    of descriptors stops accepting anyone). Each server may hold every slot and a whole
    backlog accepted in one burst, besides what the process itself keeps open."""
    from wheeld.followers.marquee.server import LIMITS as MARQUEE
    from wheeld.shell.http_server import DESCRIPTOR_RESERVE
    from wheeld.shell.metrics import LIMITS as METRICS

    units = sorted(unit for unit in UNITS.glob("*.service") if _serves_or_decides(unit))
    assert [unit.name for unit in units] == [
        "wheeld-marquee@.service",
        "wheeld.service",
        "wheeld@.service",
    ]
    for unit in units:
        (value,) = _settings("LimitNOFILE", "T1", unit.name)
        limits = MARQUEE if "marquee" in unit.name else METRICS
        assert value.isdigit() and int(value) >= limits.descriptors + DESCRIPTOR_RESERVE, unit
        # Not unlimited either: a leak fails visibly instead of eating the system's table.
        assert int(value) <= 65536, unit
