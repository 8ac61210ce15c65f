"""The faults the chaos suite throws, one small function each.

A fault waits for a random point of play, does its damage and repairs it (or
lets the daemon do so); ``inject`` then waits for games to end again, so faults
never overlap. To add one: write ``def name(rig: ChaosRig) -> None`` with the
``@fault`` decorator; ``python -m tests.chaos.run`` picks it up, and listing it
in ``SHORT`` puts it in CI.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.chaos.harness import ChaosRig

Fault = Callable[[ChaosRig], None]

#: Every fault by name, in the order they were defined.
FAULTS: dict[str, Fault] = {}


def fault(function: Fault) -> Fault:
    """Register ``function`` under its own name."""
    FAULTS[function.__name__] = function
    return function


def inject(rig: ChaosRig, name: str) -> None:
    """Throw fault ``name``, then wait until play has visibly recovered."""
    FAULTS[name](rig)
    rig.wait_game_ends(2)


@fault
def broker_kill(rig: ChaosRig) -> None:
    """The broker is SIGKILLed mid-play and comes back on the same port."""
    rig.random_point()
    rig.broker.kill()
    rig.outage()
    rig.broker.start()


@fault
def daemon_kill(rig: ChaosRig) -> None:
    """The daemon is SIGKILLed mid-play and restarted (as systemd would)."""
    rig.random_point()
    rig.kill_daemon()
    rig.outage()
    rig.daemon.start()


@fault
def link_loss(rig: ChaosRig) -> None:
    """The wheel's end of the serial link vanishes and a rebooted wheel comes back."""
    rig.random_point()
    rig.kill_wheel()
    rig.outage()
    rig.start_wheel()


#: The faults CI runs: those whose handling does not wait on fixes in flight.
SHORT = ("broker_kill", "daemon_kill", "link_loss")
