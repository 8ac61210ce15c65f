"""The systemd units: hardened to 1.5 or better, and `systemd-analyze verify` clean."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).parent.parent / "systemd"
ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed")


def _installed_copy(unit: str, tmp_path: Path, name: str | None = None) -> Path:
    # verify checks that ExecStart exists: point it at this checkout's wheeld.
    wheeld = shutil.which("wheeld") or str(Path(sys.executable).parent / "wheeld")
    text = (UNITS / unit).read_text().replace("/opt/wheeld/bin/wheeld", wheeld)
    path = tmp_path / (name or unit)
    path.write_text(text)
    return path


@pytest.mark.parametrize("unit", ["wheeld.service", "wheeld@.service"])
def test_unit_exposure_is_at_most_1_5(unit: str) -> None:
    out = subprocess.run(
        [ANALYZE, "security", "--offline=yes", str(UNITS / unit)],  # type: ignore[list-item]
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", out.stdout)
    assert match, out.stdout + out.stderr
    assert float(match.group(1)) <= 1.5


@pytest.mark.parametrize(
    ("unit", "name"),
    [
        ("wheeld.service", None),
        ("wheeld@.service", "wheeld@T1.service"),
    ],
)
def test_unit_verifies_clean(unit: str, name: str | None, tmp_path: Path) -> None:
    path = _installed_copy(unit, tmp_path, name)
    out = subprocess.run(
        [ANALYZE, "verify", str(path)],  # type: ignore[list-item]
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0 and not out.stderr.strip(), out.stderr


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
