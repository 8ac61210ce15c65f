"""The Cammegh SS2 driver's declaration and its session: live control behind the driver seam.

Listening needs no session. With ``[wheel.control] enabled = true`` the session
feeds the wheel's status frames to the :class:`SS2Controller` and acknowledges a
voided game with ``*R`` while the ball is in play, so the wheel re-spins.
"""

from __future__ import annotations

from typing import Any

from wheeld.drivers import Driver, WheelDecoder
from wheeld.drivers.cammegh_control import ControlSettings, SS2Controller
from wheeld.drivers.cammegh_ss2 import CammeghDecoder, Status
from wheeld.events import WheelEvent
from wheeld.game import Decision, NoSpin

#: States in which the ball is in play: a void there is acknowledged with ``*R``.
_BALL_IN_PLAY = (3, 4)


class CammeghSession:
    """Drives an SS2 that wheeld controls (``[wheel.control] enabled = true``)."""

    def __init__(self, decoder: CammeghDecoder, settings: ControlSettings) -> None:
        self._decoder = decoder
        self._controller = SS2Controller(settings)
        self._seen: Status | None = None
        self._connected = False

    @property
    def unanswered(self) -> list[str]:
        return self._controller.unanswered

    def on_connect(self, now: float) -> list[bytes]:
        self._connected = True
        return self._controller.on_connect(now)

    def on_disconnect(self, now: float) -> None:
        self._connected = False

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
        voided = any(isinstance(d, NoSpin) for d in decisions)
        if voided and status is not None and status.state in _BALL_IN_PLAY:
            out += self._controller.void(now)
        return out

    def on_timer(self, now: float) -> list[bytes]:
        return self._controller.on_timer(now) if self._connected else []

    def next_deadline(self) -> float | None:
        return self._controller.next_deadline() if self._connected else None


def _session(decoder: WheelDecoder, settings: Any) -> CammeghSession | None:
    if settings is None or not getattr(settings, "enabled", False):
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
        ),
    )


DRIVER = Driver(
    name="cammegh-ss2",
    default_baudrate=9600,
    decoder=CammeghDecoder,
    session=_session,
    section="control",
)
