"""The wheel's own log against the results wheeld published: where the two disagree.

A wheel that keeps a log of its games (a Cammegh's winning-number log) says, when
read, which numbers it completed, in order. wheeld holds it against its own
recent results (the pipeline's bounded history, never the whole journal): the
two series are aligned on their longest common run, newest first, so a game
either side has and the other has not shifts nothing after it. Every game the
wheel logged with a number wheeld did not publish, published differently, or
every result wheeld published that the wheel did not log, is one mismatch with
both records. Wheel games older than the oldest one aligned lie beyond what
wheeld remembers and are not judged; neither are games an earlier read judged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from wheeld.core.events import LoggedGame

#: What kind of disagreement: the wheel's number unpublished, another number
#: published for the same game, or a result the wheel never logged.
MismatchKind = Literal["not_published", "published_differently", "not_logged"]


@dataclass(frozen=True, slots=True)
class LogMismatch:
    """One game on which the wheel's log and wheeld's results disagree."""

    kind: MismatchKind
    #: The wheel's log entry (its number or misfire, and where it stood), if any.
    wheel_record: dict[str, Any] | None
    #: wheeld's result (its number, and how many results back it is), if any.
    wheeld_record: dict[str, Any] | None

    def detail(self) -> dict[str, Any]:
        """The alarm's members."""
        return {
            "kind": self.kind,
            "wheel_record": self.wheel_record,
            "wheeld_record": self.wheeld_record,
        }


def _aligned(wheel: Sequence[str | None], ours: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs of the longest common subsequence, newest first (both newest first),
    preferring the newest matches where several alignments are as long."""
    rows, cols = len(wheel), len(ours)
    # longest[i][j]: the common run of wheel[i:] and ours[j:].
    longest = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows - 1, -1, -1):
        row, below = longest[i], longest[i + 1]
        for j in range(cols - 1, -1, -1):
            if wheel[i] is not None and wheel[i] == ours[j]:
                row[j] = below[j + 1] + 1
            else:
                row[j] = max(below[j], row[j + 1])
    pairs: list[tuple[int, int]] = []
    i = j = 0
    while i < rows and j < cols:
        matched = wheel[i] is not None and wheel[i] == ours[j]
        if matched and longest[i][j] == longest[i + 1][j + 1] + 1:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif longest[i + 1][j] >= longest[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def reconcile(
    logged: Sequence[LoggedGame], judged_from: int, published: Sequence[str]
) -> list[LogMismatch]:
    """The disagreements between the wheel's ``logged`` games (oldest first; those
    before ``judged_from`` already judged) and wheeld's ``published`` results (newest
    first), oldest disagreement first."""
    if not published or not logged:
        return []
    newest_first = list(reversed(logged))
    wheel = [game.number for game in newest_first]
    pairs = _aligned(wheel, published)
    # Newest first, entries from this index on are those an earlier read judged.
    judged_until = len(logged) - judged_from
    found: list[LogMismatch] = []
    # The stretches between aligned games, newest first. What lies past the oldest
    # aligned game is beyond what wheeld remembers; aligned on nothing, the newest
    # games either side are held against each other.
    starts = [(-1, -1), *pairs[:-1]] if pairs else [(-1, -1)]
    ends = pairs or [(min(len(wheel), len(published)), len(published))]
    for (wheel_after, ours_after), (wheel_end, ours_end) in zip(starts, ends, strict=True):
        theirs = range(wheel_after + 1, wheel_end)
        mine = range(ours_after + 1, ours_end)
        for k in range(max(len(theirs), len(mine))):
            w = theirs[k] if k < len(theirs) else None
            o = mine[k] if k < len(mine) else None
            if w is not None and w >= judged_until:
                continue  # judged at an earlier read
            if w is None and wheel_after + 1 >= judged_until:
                continue  # a stretch an earlier read judged
            if o is None and w is not None and wheel[w] is None:
                continue  # a misfire the wheel logged: no number either side
            found.append(_mismatch(newest_first, w, published, o))
    found.reverse()
    return found


def _mismatch(
    newest_first: Sequence[LoggedGame], w: int | None, published: Sequence[str], o: int | None
) -> LogMismatch:
    wheel_record = None
    if w is not None:
        wheel_record = {**newest_first[w].record, "number": newest_first[w].number}
    ours = None if o is None else {"number": published[o], "results_back": o}
    if ours is None:
        kind: MismatchKind = "not_published"
    elif wheel_record is None:
        kind = "not_logged"
    else:
        kind = "published_differently"
    return LogMismatch(kind, wheel_record, ours)
