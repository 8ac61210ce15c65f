"""``wheeld verify --state-dir``: a journal's hash chains and its messages, in one pass.

The journal keeps hash chains over its rows (``wheeld.shell.journal.chain``):
decisions, operator commands, alarms and the serial frames. An edited,
deleted or reordered row is found there even when what it held was never
signed; the decisions' payloads are the signed, chained ``<base>/game``
messages, judged as ``wheeld.audit.verify`` judges any (``ChainCheck``).

Both read the same rows, so they are done together: each decision goes to a
worker process with the hash its row must link to, and the worker checks
the link and the signature (most of the work: some two million signatures a
year); a thread walks the other chains meanwhile, over the same snapshot.
Nothing waits for a whole walk before the signatures start. The verdict is
the one walking every chain first would give: a break of any chain before
any message that fails, so once one is found no more signatures are checked.
Everything streams: memory does not grow with what is verified.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from wheeld.audit.verify import (
    ChainCheck,
    Failure,
    Message,
    Report,
    _checked,
    _judge_batch,
    _worker_keys,
    in_order,
)
from wheeld.core.signing import ChainState
from wheeld.shell.journal import JournalView
from wheeld.shell.journal.chain import GENESIS, ChainWalk, Link, Walker
from wheeld.shell.journal.codec import unpack_payload


def verify_journal(
    view: JournalView,
    public_key: Ed25519PublicKey | Sequence[Ed25519PublicKey],
    report: Report | None = None,
) -> Failure | None:
    """The journal's hash chains (frames too), the breaks start-ups found, then every payload.

    Everything is judged in one pass over the snapshot: the decisions' chain
    is walked as their payloads are read, each row's link checked beside its
    signature in the worker processes, while a thread walks the other chains
    over the same snapshot. The verdict is the one a walk of every chain
    first, then the messages, would give: a broken chain is told before any
    message, the first break of the first chain (decisions, commands, alarms,
    frame blocks, older frames) before the others.
    """
    from concurrent.futures import ThreadPoolExecutor

    keys = [public_key] if isinstance(public_key, Ed25519PublicKey) else list(public_key)
    floors = view.floors()
    if report is not None:
        report.floors = sorted(seq for seq, link in floors.items() if link)  # "": a skip
    others = [table for table in view.chains if table != "decisions"]
    with ThreadPoolExecutor(1, thread_name_prefix="verify-walk") as walking:
        # The same connection, so the same snapshot: SQLite serialises its use.
        walked_others = walking.submit(view.walks, others)
        try:
            with view.reading():
                decisions = _DecisionsCheck(
                    view.walker("decisions"), keys, lambda: _broken(walked_others)
                )
                check = ChainCheck(keys, floors=floors, report=report)
                failure = decisions.verify(check)
        except BaseException:
            view.interrupt()  # an error, or ^C: the thread's walk is not waited for
            raise
        walks = {"decisions": decisions.walked, **walked_others.result()}
    for table in view.chains:
        walked = walks.get(table)
        if walked is not None and walked.breaks:
            return Failure("journal", walked.breaks[0].describe())
    for segment in view.broken_segments():
        return Failure("journal", segment)
    if failure is not None:
        return failure
    stored = view.chain_state()
    if decisions.last and stored is not None:
        final = decisions.last[0]
        if stored != ChainState(final["seq"] + 1, final["digest"]):
            return Failure(
                f"seq {final['seq']}",
                f"the journal's chain state says seq {stored.seq} is next: messages after it"
                " are missing (deleted)",
            )
    return None


#: A journal's payloads are read and their signatures checked in worker processes (a
#: year's are some two million, each a tenth of a millisecond or more to verify), this
#: many to a batch, a few batches in flight: memory does not grow with the journal.
SIGNATURE_BATCH = 500


class _DecisionsCheck:
    """The decisions' hash chain walked and their messages judged in one pass.

    Each row goes to a worker with the hash it must link to (``Walker``): the
    worker checks the link and the signature. The first broken link ends the
    messages (the chain's break is the verdict); after a message fails, or
    another chain was found broken, the rest of the rows are still linked (a
    broken link of theirs would be the verdict), their signatures no longer
    checked.
    """

    def __init__(
        self,
        walker: Walker,
        keys: Sequence[Ed25519PublicKey],
        others_broken: Callable[[], bool] = lambda: False,
    ) -> None:
        from cryptography.hazmat.primitives import serialization

        self._walker = walker
        #: Whether another chain was found broken: its break is the verdict, whatever
        #: the messages are, so they are judged no further.
        self._others_broken = others_broken
        self._raw = [
            key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            for key in keys
        ]
        #: Whether the messages are still judged (cleared once they failed).
        self._judging = True
        #: The last message's judged members and digest, once judged.
        self.last: list[dict[str, Any]] = []
        #: The decisions' chain as walked, once ``verify`` has run.
        self.walked = ChainWalk([], GENESIS)

    def verify(self, check: ChainCheck) -> Failure | None:
        """Walk the chain and judge its messages: the first message that fails, if any;
        the walk is ``walked`` after."""
        links = self._walker.links()
        if self._walker.breaks:  # a malformed anchor: told before any row
            self._judging = False
            failure = None
        else:
            verdicts = self._verdicts(links)
            failure = _checked(verdicts, check, None)
            self._judging = False
            for _ in verdicts:  # the links of the rows after a failed message
                pass
        for _ in links:  # after a break: read on to the chain's end (its head), hashing nothing
            pass
        self.walked = self._walker.finish()
        return failure

    def _verdicts(self, links: Iterator[Link]) -> Iterator[tuple[Message, str | None]]:
        """Each row's message with its signature's verdict (its digest, or ``!`` and why
        not), while judged; ends at the first broken link, which ``_walker`` then holds."""
        for batch, results in self._judged(links):
            if self._judging and self._others_broken():
                self._judging = False
            for link, (broken, verdict, judged) in zip(batch, results, strict=True):
                why = link.missing or broken
                if why is not None:
                    self._walker.broke(link, why)
                    return
                if not self._judging:
                    continue
                if not verdict.startswith("!"):
                    self.last[:] = [{**judged, "digest": verdict}]
                row_id, game_id = link.row[0], link.row[1]
                yield Message(f"decisions row {row_id} (game {game_id})", judged), verdict

    def _judged(
        self, links: Iterator[Link]
    ) -> Iterator[tuple[list[Link], list[tuple[str | None, str, dict[str, Any]]]]]:
        """Batches of rows with their workers' results, in order: in worker processes
        (a few batches in flight) when there are two cores and more than a batch."""
        import os
        from concurrent.futures import ProcessPoolExecutor

        workers = min(4, os.cpu_count() or 1)
        first = list(itertools.islice(links, SIGNATURE_BATCH))
        batches = _batches(itertools.chain(first, links))
        pool = None
        if workers >= 2 and len(first) == SIGNATURE_BATCH:
            try:
                pool = ProcessPoolExecutor(workers, initializer=_worker_keys, initargs=(self._raw,))
            except OSError:  # no shared memory for the pool's locks (a read-only /dev/shm)
                pool = None
        if pool is None:
            _worker_keys(self._raw)
            for batch in batches:
                yield batch, _judge_links(_shipped(batch), self._judging)
            return
        with pool:
            yield from in_order(
                batches,
                lambda batch: pool.submit(_judge_links, _shipped(batch), self._judging),
                2 * workers,
            )


def _broken(walking: Future[dict[str, ChainWalk]]) -> bool:
    """Whether the other chains' walk is done and found a break."""
    if not walking.done() or walking.exception() is not None:
        return False
    return any(walked.breaks for walked in walking.result().values())


def _shipped(batch: list[Link]) -> list[tuple[tuple[Any, ...], str, str]]:
    """What a worker needs of each row: its columns, the hash it links to, its own."""
    return [(link.row, link.previous, link.stored) for link in batch]


_T = TypeVar("_T")


def _batches(rows: Iterator[_T]) -> Iterator[list[_T]]:
    while batch := list(itertools.islice(rows, SIGNATURE_BATCH)):
        yield batch


def _judge_links(
    rows: list[tuple[tuple[Any, ...], str, str]], judging: bool
) -> list[tuple[str | None, str, dict[str, Any]]]:
    """Check each decision row (in a worker): why its link breaks (or None), then, while
    ``judging`` and the link holds, its payload's verdict and the members the chain is
    judged by (else ``!`` and none: the chain's break is the verdict)."""
    broken: list[str | None] = []
    texts: list[str | None] = []
    for (row_id, game_id, event, stored), previous, stored_hash in rows:
        try:
            text = unpack_payload(stored)
        except ValueError as exc:
            broken.append(f"unreadable: {exc}")
            texts.append(None)
            continue
        why = Link((row_id, game_id, event, text), stored_hash, previous, None).why("decisions")
        broken.append(why)
        texts.append(text if why is None and judging else None)
    verdicts = iter(_judge_batch([text for text in texts if text is not None]))
    return [
        (why, *next(verdicts)) if text is not None else (why, "!", {})
        for why, text in zip(broken, texts, strict=True)
    ]
