"""Which simulated wheel speaks to which installed driver.

Drivers are found as wheeld finds them, through the ``wheeld.drivers`` entry
points, and matched to a simulated wheel by the decoder they declare, never by
their names: a driver installed under another name is simulated all the same,
and a driver with no simulated wheel is simply not offered.
"""

from __future__ import annotations

from typing import Literal

#: The simulated wheels: the physical model speaking WRP/1, the Cammegh SS2 that
#: answers commands (``ss2_live.py``) and the Cammegh Mercury 360 (``mercury.py``).
WheelKind = Literal["physics", "ss2", "mercury"]
#: What installs the Cammegh wheels: they speak through the drivers' own encoders.
CAMMEGH_EXTRA = "pip install 'wheeld-simulators[cammegh]'"


def _decoders() -> dict[type, WheelKind]:
    """The decoder each simulated wheel's driver declares (the optional ones if installed)."""
    from wheeld.drivers.wrp import WrpDecoder

    found: dict[type, WheelKind] = {WrpDecoder: "physics"}
    try:
        import wheeld_cammegh  # noqa: F401  (the package first: its modules may be cached)
        from wheeld_cammegh.decoder import CammeghDecoder
        from wheeld_cammegh.mercury import MercuryDecoder
    except ImportError:
        return found  # the extra is not installed: only the WRP/1 wheel
    found[CammeghDecoder] = "ss2"
    found[MercuryDecoder] = "mercury"
    return found


def simulated_wheels() -> dict[str, WheelKind]:
    """Every installed driver a simulated wheel speaks to: its name and that wheel."""
    from wheeld.drivers import drivers

    decoders = _decoders()
    return {
        name: decoders[driver.decoder]
        for name, driver in sorted(drivers().items())
        if isinstance(driver.decoder, type) and driver.decoder in decoders
    }


def reference_driver() -> str:
    """The driver the physical model speaks by default: the installed WRP/1 driver's name."""
    return next(name for name, kind in simulated_wheels().items() if kind == "physics")


def cammegh_installed() -> bool:
    """Whether the Cammegh wheels can be simulated (the drivers' encoders import)."""
    return "ss2" in _decoders().values()


def unknown_driver(name: str) -> str:
    """One line: why no simulated wheel speaks ``name``, and what would."""
    if not cammegh_installed():
        return f"the Cammegh drivers are not installed: {CAMMEGH_EXTRA}"
    offered = ", ".join(simulated_wheels())
    return f"no simulated wheel speaks driver {name!r} (simulated: {offered})"
