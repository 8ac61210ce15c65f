"""The Cammegh SS2 driver's declaration and its session: live control behind the driver seam.

Listening needs no session. With ``[wheel.control] enabled = true`` the session
feeds the wheel's status frames to the :class:`SS2Controller` and acknowledges a
voided game with ``*R`` while the ball is in play, so the wheel re-spins.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from wheeld.core.events import Direction, WheelEvent
from wheeld.core.game import Decision, NoSpin, Result
from wheeld.core.rules import RulesConfig
from wheeld.drivers import Driver, WheelDecoder
from wheeld_cammegh.control import AUTO_STATUS_BIT, ControlSettings, SS2Controller
from wheeld_cammegh.decoder import DEFAULT_BAUDRATE, NAME, CammeghDecoder, Status

#: With ``*X`` polling the link timeout must outlast this many poll intervals.
LINK_TIMEOUT_POLLS = 3


class ControlConfig(BaseModel):
    """``[wheel.control]``: drive a Cammegh SS2 instead of only listening to it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    enabled: bool = Field(
        default=False,
        description="Drive the wheel instead of only listening (drivers/cammegh/README.md).",
    )
    operating_mode: int = Field(
        default=1159,
        ge=0,
        le=65535,
        description="Sent as `*o` on every connect. The maker's value for a game server: "
        "1159 = 1+2+4+128+1024 (bit 128: automatic status).",
    )
    start_games: bool = Field(
        default=True, description="Send `*u 1` once bets have been open `bets_open_s`."
    )
    bets_open_s: float = Field(
        default=15.0,
        ge=0,
        le=3600,
        description="How long bets stay open before `*u 1` (manual-start mode), in seconds.",
    )
    sensor_events: bool = Field(
        default=True,
        description="Ask for `*bs` ball passes (`*I 4`), so revolutions are counted.",
    )
    poll_s: float = Field(
        default=0.5,
        ge=0.1,
        le=60,
        description="The `*X` poll interval without automatic status, in seconds.",
    )
    game_options: int | None = Field(
        default=None,
        ge=0,
        le=255,
        description="Firmware 2.52's `*T g` game options, set on connect (8 no relaunch after "
        "a misfire, 16 direction control, 32 state 7); unset: not sent (older firmware). "
        "With 16 and mode bit 1, wheeld picks each game's direction.",
    )
    check_clock: bool = Field(
        default=False,
        description="Read the wheel's clock (`*d g`) on every connect: `wheel_clock_off` when "
        "it is more than 2 s off the host's (both taken as UTC).",
    )
    set_clock: bool = Field(
        default=False, description="With `check_clock`, then set it to the host's (`*d s`)."
    )
    read_log: bool = Field(
        default=False,
        description="Each time the wheel closes (state 6), read its own records (`*w`, `*W`, "
        "`*s t`, `*s r`): `wheel_log_mismatch` for every result it logged that wheeld did not "
        "publish (or published differently); its chi-squared beside wheeld's on <base>/stats.",
    )


def _check(control: ControlConfig, rules: RulesConfig) -> list[tuple[str, str]]:
    # Without automatic status the SS2 speaks only when polled: a link timeout
    # shorter than a few polls would void every game.
    polled = not control.operating_mode & AUTO_STATUS_BIT
    floor = round(LINK_TIMEOUT_POLLS * control.poll_s * 1000)
    if control.enabled and polled and rules.link_timeout_ms < floor:
        return [
            (
                "rules.link_timeout_ms",
                f"must be at least {LINK_TIMEOUT_POLLS} x wheel.control.poll_s "
                f"({floor} ms) when the wheel is polled (operating_mode without bit 128)",
            )
        ]
    return []


#: States in which the ball is in play: a void there is acknowledged with ``*R``.
_BALL_IN_PLAY = (3, 4)


class CammeghSession:
    """Drives an SS2 that wheeld controls (``[wheel.control] enabled = true``)."""

    def __init__(self, decoder: CammeghDecoder, settings: ControlSettings) -> None:
        self._decoder = decoder
        self._controller = SS2Controller(settings, decoder.wheel_log)
        self._seen: Status | None = None
        self._connected = False

    @property
    def unanswered(self) -> list[str]:
        return self._controller.unanswered

    @property
    def alarms(self) -> list[tuple[str, dict[str, Any]]]:
        """Alarms the controller raised (the wheel's clock), for the pipeline to say."""
        return self._controller.alarms

    def on_connect(self, now: float) -> list[bytes]:
        self._connected = True
        return self._controller.on_connect(now)

    def on_disconnect(self, now: float) -> None:
        self._connected = False

    def on_last_result(self, direction: Direction | None) -> None:
        """The rotor direction of the table's last result, as the journal keeps it."""
        self._controller.last_result = direction

    def on_event(self, event: WheelEvent, now: float) -> list[bytes]:
        return self._controller.on_event(event, now) if self._connected else []

    def after_decisions(self, decisions: list[Decision], now: float) -> list[bytes]:
        if not self._connected:
            return []
        out: list[bytes] = []
        status = self._decoder.last_status
        if status is not None and status is not self._seen:
            self._seen = status
            out += self._controller.on_status(status, now)
        for decision in decisions:
            if isinstance(decision, Result):
                self._controller.last_result = decision.rotor_direction
        voided = any(isinstance(d, NoSpin) for d in decisions)
        if voided and status is not None and status.state in _BALL_IN_PLAY:
            out += self._controller.void(now)
        return out

    def on_timer(self, now: float) -> list[bytes]:
        return self._controller.on_timer(now) if self._connected else []

    def next_deadline(self) -> float | None:
        return self._controller.next_deadline() if self._connected else None


def _session(decoder: WheelDecoder, settings: ControlConfig | None) -> CammeghSession | None:
    if settings is None or not settings.enabled:
        return None  # listening only
    assert isinstance(decoder, CammeghDecoder)
    return CammeghSession(
        decoder,
        ControlSettings(
            operating_mode=settings.operating_mode,
            start_games=settings.start_games,
            bets_open_s=settings.bets_open_s,
            sensor_events=settings.sensor_events,
            poll_s=settings.poll_s,
            game_options=settings.game_options,
            check_clock=settings.check_clock,
            set_clock=settings.set_clock,
            read_log=settings.read_log,
        ),
    )


DRIVER: Driver[ControlConfig] = Driver(
    name=NAME,
    default_baudrate=DEFAULT_BAUDRATE,
    decoder=CammeghDecoder,
    session=_session,
    settings=ControlConfig,
    section="control",
    check=_check,
)
