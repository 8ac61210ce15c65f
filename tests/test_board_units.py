"""The board's systemd units: the marquee and the passive display.

Hardened like the daemon's unit (``wheeld@.service``), `systemd-analyze verify`
clean, reading the table's configuration and never a signing key.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_systemd_units import (
    UNITS,
    assert_verifies_clean,
    exposure,
    installed_copy,
    needs_analyze,
)

BOARD_UNITS = ("wheeld-marquee@.service", "wheeld-display@.service")

#: What every wheeld unit sets, as the daemon's does: no unit may drop one.
HARDENING = (
    "DynamicUser=yes",
    "DevicePolicy=closed",
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "NoNewPrivileges=yes",
    "UMask=0077",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "PrivateUsers=yes",
    "PrivateIPC=yes",
    "ProtectHostname=yes",
    "ProtectClock=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectProc=invisible",
    "ProcSubset=pid",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "MemoryDenyWriteExecute=yes",
    "RemoveIPC=yes",
    "KeyringMode=private",
    "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service",
    "SystemCallFilter=~@privileged @resources",
    "IPAddressDeny=any",
    "IPAddressAllow=localhost",
)


def _lines(unit: str) -> list[str]:
    return [line.strip() for line in (UNITS / unit).read_text().splitlines()]


@pytest.mark.parametrize("unit", BOARD_UNITS)
def test_board_units_are_hardened_like_the_daemon(unit: str) -> None:
    lines = _lines(unit)
    missing = [key for key in HARDENING if key not in lines]
    assert not missing, (unit, missing)
    assert all(key in _lines("wheeld@.service") for key in HARDENING)  # the daemon's own


@pytest.mark.parametrize("unit", BOARD_UNITS)
def test_board_units_read_the_table_config_and_no_signing_key(unit: str) -> None:
    text = (UNITS / unit).read_text()
    assert "--config /etc/wheeld/%i.toml" in text
    credentials = [line for line in _lines(unit) if line.startswith("LoadCredential=")]
    # A password only by drop-in: a LoadCredential= whose file is missing fails the unit.
    assert credentials == []
    assert "Environment=\"WHEELD_TABLE__ID='%i'\"" in text  # the instance is the table
    assert "StateDirectory" not in text  # neither keeps anything


def test_the_marquee_listens_on_the_network_and_touches_no_device() -> None:
    lines = _lines("wheeld-marquee@.service")
    assert "ExecStart=/opt/wheeld/bin/wheeld marquee --config /etc/wheeld/%i.toml" in lines
    assert "PrivateDevices=yes" in lines
    assert not [line for line in lines if line.startswith(("DeviceAllow=", "SupplementaryGroups"))]
    # Its browsers are on the casino's private networks.
    assert "IPAddressAllow=10.0.0.0/8 172.16.0.0/12 192.168.0.0/16" in lines


def test_the_display_may_open_serial_ports_only() -> None:
    lines = _lines("wheeld-display@.service")
    execs = [line for line in lines if line.startswith("ExecStart=")]
    assert execs == [
        "ExecStart=/opt/wheeld/bin/wheeld display --config /etc/wheeld/%i.toml"
        " --port ${DISPLAY_PORT} --baudrate ${DISPLAY_BAUDRATE}"
    ]
    assert "EnvironmentFile=/etc/wheeld/%i-display.env" in lines
    assert "SupplementaryGroups=dialout" in lines
    devices = [line for line in lines if line.startswith("DeviceAllow=")]
    assert devices == [f"DeviceAllow=char-{kind} rw" for kind in ("ttyUSB", "ttyACM", "ttyS")]


@needs_analyze
@pytest.mark.parametrize("unit", BOARD_UNITS)
def test_board_unit_exposure_is_at_most_1_5(unit: str) -> None:
    assert exposure(unit) <= 1.5


@needs_analyze
@pytest.mark.parametrize("unit", BOARD_UNITS)
def test_board_unit_verifies_clean(unit: str, tmp_path: Path) -> None:
    assert_verifies_clean(installed_copy(unit, tmp_path, unit.replace("@", "@T1")))
