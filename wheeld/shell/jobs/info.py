"""``<base>/info``: what is running (software, drivers, wheel, key, configuration).

Said when the daemon first applies anything, and again whenever the wheel's
own hello (model, firmware, serial, pockets) says something new. The software's
and the drivers' digests are read then too, not while the daemon is built: the
first apply follows READY (or a wheel port that is not there yet), before the
wheel's first line is decided, so reading the package's files is no part of
start → READY.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from wheeld.shell import identity
from wheeld.shell.jobs.base import Job, Parts
from wheeld.table.effects import Outgoing


class InfoJob(Job):
    """Retained, signed when there is a key; republished when the wheel differs."""

    name: ClassVar[str] = "info"

    def __init__(self, parts: Parts) -> None:
        super().__init__(parts)
        self._base = parts.pipeline.settings.base_topic
        self.topic = f"{self._base}/info"
        #: What <base>/info last said of the wheel.
        self._said: tuple[Any, ...] | None = None

    def applied(self) -> None:
        wheel = tuple(self._wheel().values())
        if wheel != self._said:
            self._said = wheel
            # The clock as it reads: a step is noticed by the next input, not midway
            # through applying what the last one did.
            self.parts.enqueue(self.message(self.parts.scheduler.clock.wall()))

    def message(self, now: float) -> Outgoing:
        """The retained <base>/info as it stands."""
        parts = self.parts
        signer = parts.signer
        payload = identity.info_payload(
            parts.config,
            wheel=self._wheel(),
            kid=signer.kid if signer is not None else None,
            public_key_pem=signer.public_pem().decode("ascii") if signer is not None else None,
            now=now,
            epoch=parts.journal.epoch,
        )
        if signer is not None:
            payload = signer.sign(payload)
        return Outgoing.on(self._base, "info", json.dumps(payload))

    def _wheel(self) -> dict[str, Any]:
        pipeline = self.parts.pipeline
        info = pipeline.view.wheel_info
        return {
            "model": info.get("model"),
            "firmware": info.get("firmware"),
            "serial": info.get("serial"),
            "pockets": pipeline.view.pockets,
        }
