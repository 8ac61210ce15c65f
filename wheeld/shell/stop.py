"""Stopping the tasks that own an MQTT client (the publisher, a follower, the archive's).

One cancellation is not always enough: such a task is cancelled again until
it ends (``stop_tasks``), the same way wherever one is stopped.
"""

from __future__ import annotations

import asyncio
from typing import Any

#: A task being stopped is cancelled again this often until it ends.
STOP_AGAIN_S = 1.0


async def stop_tasks(*tasks: asyncio.Task[Any], patience_s: float | None = None) -> None:
    """Cancel ``tasks`` and wait until they end, cancelling each again every ``STOP_AGAIN_S``.

    A task that owns an aiomqtt client may swallow a cancellation on Python 3.11:
    ``asyncio.wait_for``, which aiomqtt awaits its CONNACK and its disconnection
    with, loses one that lands as the awaited future completes, and the task goes on
    reconnecting (found: a marquee's stop, and a test's publisher, that never ended
    beside a busy suite). ``patience_s``: stop waiting after that long, the tasks
    left cancelled (a daemon's stop is bounded); None: until they end. What a task
    raised is taken here, not reported as never retrieved.
    """
    loop = asyncio.get_running_loop()
    give_up = None if patience_s is None else loop.time() + patience_s
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        wait = STOP_AGAIN_S if give_up is None else min(STOP_AGAIN_S, give_up - loop.time())
        if wait <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=wait)
    await asyncio.gather(*(task for task in tasks if task.done()), return_exceptions=True)
