"""Operator commands, as the publisher hands them over: rate, carry out, reply.

Within its rates (``CommandGate``) a command goes to the pipeline as the table's
other inputs do (``TableInputs.on_command``: a raise there stops the daemon), or
for ``recall`` to the journal (``RecallDesk``); its effects are applied and the
reply handed back to the publisher to send. Past its rate it gets no reply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wheeld.core.commands import OperatorCommand, claimed_operator
from wheeld.core.messages import SCHEMA_VERSION

if TYPE_CHECKING:
    from wheeld.shell.clock import HostClock
    from wheeld.shell.command_rate import CommandGate
    from wheeld.shell.inputs import TableInputs
    from wheeld.shell.recall_desk import RecallDesk


class CommandDesk:
    """The publisher's ``CommandHandler``: a reply, or None for a command past its rate."""

    def __init__(
        self,
        *,
        log: Any,
        clock: HostClock,
        inputs: TableInputs,
        gate: CommandGate,
        recalls: RecallDesk,
    ) -> None:
        self._log = log
        self._clock = clock
        self._inputs = inputs
        self._gate = gate
        self._recalls = recalls

    def close(self) -> None:
        """At a stop: the recall process ends."""
        self._recalls.reader.close()

    async def __call__(self, command: OperatorCommand) -> dict[str, Any] | None:
        now = self._clock.now()
        if not self._gate.allow(claimed_operator(command), command.name, now):
            # Past the rate: no parsing, no reply, no record of its own (a count
            # is journaled each minute): a flood costs nothing later.
            return None
        if command.name == "recall":
            reply = await self._recalls.answer(command, now)
            return {**reply, "schema_version": SCHEMA_VERSION}
        done = self._inputs.on_command(command, now)
        if done is None:  # the table broke, on it or before: the daemon is stopping
            return {
                "ok": False,
                "error": "internal error: the daemon is stopping, to start again",
                "schema_version": SCHEMA_VERSION,
            }
        return {**done, "schema_version": SCHEMA_VERSION}
