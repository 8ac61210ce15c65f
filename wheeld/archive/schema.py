"""The archive's PostgreSQL schema, as versioned migrations the service applies itself.

Each migration runs once, in its own transaction, under an advisory lock (two
archives starting together never both apply one), and is recorded in
``archive_migrations``. A migration, once shipped, is never edited: a change is
a new one. docs/archive.md describes the tables and views.
"""

from __future__ import annotations

#: ``pg_advisory_xact_lock`` key of the migrations (any bigint; "wheelda").
MIGRATION_LOCK = 0x776865656C6461
#: ``pg_try_advisory_lock`` key held by the running archive for as long as it is connected:
#: one archive a database ("wheeldb").
ARCHIVE_LOCK = 0x776865656C6462

MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (
        1,
        "messages, epochs, gaps, keys, the tables' alarms, info and statistics, views",
        """
CREATE TYPE archive_verdict AS ENUM
    ('verified', 'bad_signature', 'unknown_key', 'chain_break', 'unsigned');

CREATE TABLE archive_tables (
    table_id text PRIMARY KEY,
    base_topic text NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now(),
    updated timestamptz NOT NULL DEFAULT now()
);

-- Every <base>/game message, verbatim, with what the archive judged of it.
CREATE TABLE messages (
    id bigserial PRIMARY KEY,
    table_id text NOT NULL,
    epoch text NOT NULL,
    seq bigint NOT NULL,
    game_id bigint NOT NULL,
    event text NOT NULL,
    kid text,
    digest text NOT NULL,
    prev text,
    verdict archive_verdict NOT NULL,
    why text,
    received_at timestamptz NOT NULL,
    ts timestamptz,
    day date NOT NULL,
    number text,
    reason text,
    source text NOT NULL CHECK (source IN ('live', 'recall')),
    topic text NOT NULL,
    payload text NOT NULL,
    -- A message delivered twice is kept once; a second, different one under the same
    -- seq is kept beside it (flagged), never in its place.
    CONSTRAINT messages_once UNIQUE (table_id, epoch, seq, digest)
);
-- A table's day (the report), a table's game (wheeld archive game), what is flagged.
CREATE INDEX messages_table_day ON messages (table_id, day);
CREATE INDEX messages_table_game ON messages (table_id, game_id);
CREATE INDEX messages_flagged ON messages (table_id, kid) WHERE verdict <> 'verified';

-- Where the archive holds each epoch from and to: read at start (never the messages).
CREATE TABLE epochs (
    table_id text NOT NULL,
    epoch text NOT NULL,
    first_seq bigint NOT NULL,
    first_prev text,
    first_game bigint NOT NULL,
    head_seq bigint NOT NULL,
    head_digest text NOT NULL,
    head_game bigint NOT NULL,
    after_epoch text,
    after_seq bigint,
    began timestamptz NOT NULL,
    updated timestamptz NOT NULL,
    PRIMARY KEY (table_id, epoch)
);

-- Seqs missing between two messages held: open (being asked of the table with recall)
-- or unfillable (the table answered without them, or never answered).
CREATE TABLE gaps (
    table_id text NOT NULL,
    epoch text NOT NULL,
    first_seq bigint NOT NULL,
    last_seq bigint NOT NULL,
    before_digest text,
    before_game bigint,
    after_prev text,
    after_game bigint NOT NULL,
    state text NOT NULL CHECK (state IN ('open', 'unfillable')),
    attempts integer NOT NULL DEFAULT 0,
    why text,
    found timestamptz NOT NULL,
    PRIMARY KEY (table_id, epoch, first_seq)
);

-- Keys trusted on first use (the operator's files are read at start, not kept here).
CREATE TABLE pinned_keys (
    table_id text NOT NULL,
    kid text NOT NULL,
    public_key text NOT NULL,
    pinned timestamptz NOT NULL,
    PRIMARY KEY (table_id, kid)
);

-- The tables' <base>/alarm and <base>/info messages, verbatim, each kept once.
CREATE TABLE table_alarms (
    id bigserial PRIMARY KEY,
    table_id text NOT NULL,
    code text,
    kid text,
    verdict archive_verdict NOT NULL,
    why text,
    received_at timestamptz NOT NULL,
    day date NOT NULL,
    digest text NOT NULL,
    topic text NOT NULL,
    payload text NOT NULL,
    UNIQUE (table_id, digest)
);
CREATE INDEX table_alarms_table_day ON table_alarms (table_id, day);

CREATE TABLE table_info (
    id bigserial PRIMARY KEY,
    table_id text NOT NULL,
    kid text,
    verdict archive_verdict NOT NULL,
    why text,
    received_at timestamptz NOT NULL,
    digest text NOT NULL,
    topic text NOT NULL,
    payload text NOT NULL,
    UNIQUE (table_id, digest)
);

-- <base>/stats: the last of each day of each table (the figures at the day's end).
CREATE TABLE table_stats (
    table_id text NOT NULL,
    day date NOT NULL,
    received_at timestamptz NOT NULL,
    payload text NOT NULL,
    PRIMARY KEY (table_id, day)
);

-- What was no message of a table at all (not JSON, no seq, ...): kept, as it came.
CREATE TABLE rejected (
    id bigserial PRIMARY KEY,
    received_at timestamptz NOT NULL,
    topic text NOT NULL,
    reason text NOT NULL,
    payload bytea NOT NULL
);

-- The archive's own alarms: kept in the commit that raised them, then published.
CREATE TABLE archive_alarms (
    id bigserial PRIMARY KEY,
    at timestamptz NOT NULL,
    code text NOT NULL,
    table_id text,
    payload text NOT NULL,
    published boolean NOT NULL DEFAULT false
);
CREATE INDEX archive_alarms_unpublished ON archive_alarms (id) WHERE NOT published;
CREATE INDEX archive_alarms_table_day ON archive_alarms (table_id, at);

-- Each game's verified result (one row per game and epoch).
CREATE VIEW results AS
SELECT table_id, epoch, game_id, seq, ts, day, number,
       payload::jsonb ->> 'color' AS color, received_at, id AS message_id
FROM messages
WHERE event = 'result' AND verdict = 'verified';

-- Per table, per day (UTC): games, results, no-spins, what was flagged.
CREATE VIEW daily_summary AS
SELECT table_id, day,
       count(DISTINCT (epoch, game_id)) AS games,
       count(*) FILTER (WHERE event = 'result' AND verdict = 'verified') AS results,
       count(*) FILTER (WHERE event = 'no_spin' AND verdict = 'verified') AS no_spins,
       count(*) AS messages,
       count(*) FILTER (WHERE verdict <> 'verified') AS flagged,
       min(ts) AS first_ts, max(ts) AS last_ts
FROM messages
GROUP BY table_id, day;
""",
    ),
    (
        2,
        "rejected: the size of what came (only its first 64 KiB are kept)",
        """
-- Nullable: a wheeld from before this migration, run again on this database, can still
-- keep what it rejects.
ALTER TABLE rejected ADD COLUMN size bigint;
UPDATE rejected SET size = octet_length(payload);
""",
    ),
)
