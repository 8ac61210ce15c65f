"""The driver seam from outside: a driver wheeld has never heard of plugs in by entry point.

``FAKE_DRIVER`` below is a whole third-party driver in miniature: a line
protocol of its own, counters and a configuration section with its own model
and checks. It is registered the way a distribution registers one (an entry
point in the ``wheeld.drivers`` group), then found by configuration
validation and by ``wheeld replay``. The same mechanism, run the other way,
shows what a wheeld without the Cammegh SS2 distribution says.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, assert_type

import pytest
from pydantic import BaseModel, ConfigDict, Field

from wheeld import drivers as registry
from wheeld.cli import main as wheeld
from wheeld.config import ConfigError, driver_settings, load
from wheeld.core.capture import FORMAT_LINE, format_line
from wheeld.core.events import (
    BallLaunched,
    Heartbeat,
    RotorDatum,
    WheelEvent,
    WheelNoMoreBets,
    WinningNumber,
)
from wheeld.core.rules import RulesConfig
from wheeld.drivers import ENTRY_POINT_GROUP, CounterSet, Driver
from wheeld.drivers.wrp import DRIVER as WRP_DRIVER

# -- the fake driver: "<tick> BEAT | ROTOR | LAUNCH | CLOSED | WIN <n>", a line each


@dataclass(slots=True)
class FakeCounters(CounterSet):
    frames: int = 0
    junk: int = 0


class FakeDecoder:
    def __init__(self) -> None:
        self.counters = FakeCounters()
        self._pending = b""
        self._seq = 0

    def feed(self, data: bytes, now: float = 0.0) -> list[WheelEvent]:
        *lines, self._pending = (self._pending + data).split(b"\n")
        return [event for line in lines if (event := self._event(line)) is not None]

    def _event(self, line: bytes) -> WheelEvent | None:
        match line.decode("ascii", "replace").split():
            case [tick, "BEAT"] if tick.isdigit():
                self._seq += 1
                event: WheelEvent = Heartbeat(self._seq, int(tick))
            case [tick, "ROTOR"] if tick.isdigit():
                self._seq += 1
                event = RotorDatum(self._seq, int(tick), "cw", period_ms=3000)
            case [tick, "LAUNCH"] if tick.isdigit():
                event = BallLaunched(int(tick), "cw", "ccw", counts_revolutions=False)
            case [tick, "CLOSED"] if tick.isdigit():
                event = WheelNoMoreBets(int(tick))
            case [tick, "WIN", number] if tick.isdigit():
                event = WinningNumber(int(tick), number)
            case _:
                self.counters.junk += 1
                return None
        self.counters.frames += 1
        return event


class FakeSettings(BaseModel):
    """``[wheel.fake]``: the fake wheel's own section."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    volume: int = Field(default=3, ge=0, le=10)
    chime: bool = False


def _check(settings: FakeSettings, rules: RulesConfig) -> list[tuple[str, str]]:
    # A rule that reads [rules] too, as real drivers' checks do.
    if settings.chime and rules.settle_ms < 1500:
        return [("wheel.fake.chime", "needs rules.settle_ms of at least 1500")]
    return []


FAKE_DRIVER: Driver[FakeSettings] = Driver(
    name="fake",
    default_baudrate=4800,
    decoder=FakeDecoder,
    settings=FakeSettings,
    section="fake",
    check=_check,
)


def test_a_driver_is_typed_by_its_settings_model() -> None:
    """``Driver`` is generic over its settings model: ``mypy --strict`` (tools/test.sh)
    holds its session, check and configure to the model ``settings`` names. Without
    it (``settings: Any``), the ignore below would be unused, which strict refuses."""

    class Other(BaseModel):
        volume: str = "loud"

    def wrong(settings: Other, rules: RulesConfig) -> list[tuple[str, str]]:
        return []

    mistaken = Driver(
        name="mistaken",
        default_baudrate=9600,
        decoder=FakeDecoder,
        settings=FakeSettings,
        check=wrong,  # type: ignore[arg-type]
    )
    assert_type(registry.driver_named("wrp"), Driver[Any])
    assert mistaken.settings is FakeSettings and FAKE_DRIVER.settings is FakeSettings


SS2 = "cammegh-ss2"
MERCURY = "cammegh-mercury"


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Pretend which driver distributions are installed: entry points added or taken away."""
    real_entry_points = metadata.entry_points

    def install(add: dict[str, str] | None = None, remove: tuple[str, ...] = ()) -> None:
        points = [
            point
            for point in real_entry_points(group=ENTRY_POINT_GROUP)
            if point.name not in remove
        ]
        points += [
            metadata.EntryPoint(name, value, ENTRY_POINT_GROUP)
            for name, value in (add or {}).items()
        ]

        def entry_points(**selection: Any) -> Any:
            if selection.get("group") == ENTRY_POINT_GROUP:
                return metadata.EntryPoints(points)
            return real_entry_points(**selection)

        monkeypatch.setattr(metadata, "entry_points", entry_points)
        # The registry is read once and cached: read it again under the new set.
        monkeypatch.setattr(registry, "_registry", None)
        monkeypatch.setattr(registry, "_broken", {})

    return install


@pytest.fixture
def fake_installed(installed: Callable[..., None]) -> None:
    installed(add={"fake": f"{__name__}:FAKE_DRIVER"})


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "wheeld.toml"
    path.write_text(text)
    return path


def _problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load(_config(tmp_path, text), {})
    return [str(report) for report in caught.value.reports]


# -- a driver from outside --------------------------------------------------------


@pytest.mark.usefixtures("fake_installed")
def test_an_entry_point_driver_is_installed() -> None:
    assert registry.drivers()["fake"] is FAKE_DRIVER
    assert registry.driver_named("fake").default_baudrate == 4800


@pytest.mark.usefixtures("fake_installed")
def test_config_accepts_the_driver_and_reads_its_section_with_its_model(tmp_path: Path) -> None:
    config = load(_config(tmp_path, '[wheel]\ndriver = "fake"\n[wheel.fake]\nvolume = 7\n'), {})
    assert config.wheel.driver == "fake"
    assert driver_settings(config) == FakeSettings(volume=7)


@pytest.mark.usefixtures("fake_installed")
@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("[wheel.fake]\nvolume = 11\n", "wheel.fake.volume"),
        ('[wheel.fake]\nvolume = "3"\n', "wheel.fake.volume"),
        ("[wheel.fake]\nloud = true\n", "wheel.fake.loud: unknown key"),
        ("[wheel.fake]\nchime = true\n", "wheel.fake.chime: needs rules.settle_ms"),
        ("[wheel.control]\nenabled = true\n", "wheel.control: unknown key (driver 'fake')"),
    ],
)
def test_its_section_is_judged_by_its_own_model(tmp_path: Path, section: str, problem: str) -> None:
    (line,) = _problems(tmp_path, f'[wheel]\ndriver = "fake"\n{section}')
    assert problem in line
    assert "\n" not in line


@pytest.mark.usefixtures("fake_installed")
def test_replay_drives_the_game_rules_through_the_driver(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The rotor turns throughout (a silent rotor voids the game: rotor_stopped).
    wire = [b"0 ROTOR", b"400 LAUNCH", b"3000 ROTOR", b"5000 CLOSED", b"6000 ROTOR"]
    wire += [b"9000 ROTOR", b"9000 WIN 17", b"9500 BEAT", b"noise"]
    capture = tmp_path / "fake.cap"
    capture.write_text(
        "".join(
            [f"{FORMAT_LINE}\n"]
            + [format_line(1_760_000_000 + i / 2, "<", line + b"\n") for i, line in enumerate(wire)]
        )
    )
    assert wheeld(["replay", "--driver", "fake", str(capture)]) == 0
    out, err = capsys.readouterr()
    games = [json.loads(line) for line in out.splitlines()]
    assert [game["event"] for game in games] == ["spinning", "no_more_bets", "result"]
    assert games[-1]["number"] == "17"
    assert "driver fake" in err
    assert "no frame of driver" not in err


# -- a wheeld without the SS2 distribution ---------------------------------------


def test_without_the_ss2_distribution_its_driver_is_refused_in_one_line(
    tmp_path: Path, installed: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    installed(remove=(SS2, MERCURY))
    assert sorted(registry.drivers()) == ["wrp"]
    config = _config(
        tmp_path,
        f'[wheel]\ndriver = "{SS2}"\nport = "socket://127.0.0.1:1"\n'
        f'[signing]\nrequired = false\n[state]\ndir = "{tmp_path / "state"}"\n',
    )
    assert wheeld(["check-config", str(config)]) != 0
    out, err = capsys.readouterr()
    (line,) = (out + err).splitlines()
    assert line.endswith(f"wheel.driver: unknown driver '{SS2}' (installed: wrp)")


def test_without_the_ss2_distribution_replay_names_the_installed_drivers(
    tmp_path: Path, installed: Callable[..., None], capsys: pytest.CaptureFixture[str]
) -> None:
    installed(remove=(SS2, MERCURY))
    capture = tmp_path / "ss2.cap"
    capture.write_text(f"{FORMAT_LINE}\n# driver: {SS2}\n")
    assert wheeld(["replay", str(capture)]) != 0
    (line,) = capsys.readouterr().err.splitlines()
    assert f"unknown driver '{SS2}' (installed: wrp)" in line


def test_a_driver_that_does_not_load_is_named_with_why(
    installed: Callable[..., None],
) -> None:
    installed(add={"broken": "wheeld_no_such_module:DRIVER"})
    with pytest.raises(registry.UnknownDriver, match="'broken' is installed but does not load: "):
        registry.driver_named("broken")
    assert "wrp" in registry.drivers()


def test_the_reference_driver_is_found_without_reading_entry_points(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A start configured for WRP/1 does not pay for a scan of every installed
    distribution's metadata (nor import the other drivers) before READY."""

    def no_scan(**selection: Any) -> Any:
        raise AssertionError(f"entry points read: {selection}")

    monkeypatch.setattr(metadata, "entry_points", no_scan)
    monkeypatch.setattr(registry, "_registry", None)
    assert registry.driver_named("wrp") is WRP_DRIVER


def test_a_plug_in_named_wrp_does_not_replace_the_reference_driver(
    installed: Callable[..., None],
) -> None:
    installed(add={"wrp": f"{__name__}:FAKE_DRIVER"})
    assert registry.drivers()["wrp"] is WRP_DRIVER
    assert registry.driver_named("wrp") is WRP_DRIVER
