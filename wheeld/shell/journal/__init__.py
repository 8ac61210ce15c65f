"""The journal: a table's durable memory, in its state directory.

``store`` (the ``Journal`` the daemon writes), and what it holds:
``records`` (decisions, commands and alarms), ``durability`` (which commit
is fsync'd), ``connection`` (the database, one write at a time), ``chain``
(the hash chains), ``frames`` (serial lines in compressed blocks),
``outbox``, ``state`` (what a start resumes from), ``marks`` (``game-ids``
and the lock beside the database); ``schema`` (tables and upgrades),
``codec`` (how payloads and blocks are stored), ``retention``, ``view``
(read-only, for recall, verify, export and stats) and ``recall`` (games
read back with their events and lines, for ``recall`` and ``export``).
"""

from wheeld.shell.journal.chain import CHAINED, ChainBreak, ChainWalk, link_hash
from wheeld.shell.journal.durability import fsync_due
from wheeld.shell.journal.errors import JournalCorrupt, JournalError, JournalWriteError
from wheeld.shell.journal.frames import JournalFrame
from wheeld.shell.journal.marks import BOOT_ID_FILE, GAME_IDS_FILE, LOCK_FILE
from wheeld.shell.journal.outbox import OutboxEntry
from wheeld.shell.journal.retention import Retention
from wheeld.shell.journal.store import JOURNAL_FILE, Journal
from wheeld.shell.journal.view import JournalView

__all__ = [
    "BOOT_ID_FILE",
    "CHAINED",
    "GAME_IDS_FILE",
    "JOURNAL_FILE",
    "LOCK_FILE",
    "ChainBreak",
    "ChainWalk",
    "Journal",
    "JournalCorrupt",
    "JournalError",
    "JournalFrame",
    "JournalView",
    "JournalWriteError",
    "OutboxEntry",
    "Retention",
    "fsync_due",
    "link_hash",
]
